"""The far side of tests/test_curve_netns.py, run inside a network namespace: `python -m tests.curve_netns_peer
link|gui <host> <ports,...> <keys_dir>`. It prints one JSON line saying what it saw.

link: a client without keys says hello to the learner (it must not be answered), then actor-0 with its keys says
hello, sends a step batch and waits for weights. gui: the actor's GUI bridge with its keys, and one without, tick
for a while (the GUI must hear the first only)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from robo_rl.transport.security import CurveKeys

WEIGHTS_WAIT_S = 8.0
GUI_TICK_S = 1.5  # long past the CURVE handshake on a loaded machine
TICK_META = {"mode": "POLICY", "policy_version": 0, "episode": 0, "step": 1, "reward": 0.0, "return": 0.0}


def link(host: str, ports: list[int], keys_dir: str) -> dict:
    from robo_rl.transport.actor_link import ActorLink
    from robo_rl.transport.errors import TransportError

    seen = {}
    plain = ActorLink(host, *ports, "plain")
    try:
        plain.hello("t", timeout_s=1)
        seen["plain"] = "answered"
    except TransportError as e:
        seen["plain"] = f"refused: {e}"
    finally:
        plain.close(0)
    actor = ActorLink(host, *ports, "actor-0", curve=CurveKeys.load(keys_dir, "actor-0"))
    try:
        actor.hello("t", timeout_s=3)
        actor.send_steps({}, {"payload": np.array([7], np.int64)})
        deadline = time.monotonic() + WEIGHTS_WAIT_S
        while time.monotonic() < deadline and "weights" not in seen:
            for kind, meta, arrays in actor.poll(100):
                if kind == "weights":
                    seen["weights"] = {"version": meta["version"], "w": arrays["w"].tolist()}
    finally:
        actor.close(0)
    return seen


def gui(host: str, ports: list[int], keys_dir: str) -> dict:
    from robo_rl.gui.bridge import GuiBridge
    from robo_rl.gui.web_device import WebDevice

    class Human:
        paused = False

    keys = CurveKeys.load(keys_dir, "actor-0")
    bridges = {
        "actor-0": GuiBridge("actor-0", host, ports[0], WebDevice().start(), Human(), curve=keys),
        "plain": GuiBridge("plain", host, ports[0], WebDevice().start(), Human()),
    }
    deadline = time.monotonic() + GUI_TICK_S
    while time.monotonic() < deadline:
        for bridge in bridges.values():
            bridge.tick(TICK_META)
        time.sleep(0.05)
    counts = {name: dict(bridge.counts) for name, bridge in bridges.items()}
    for bridge in bridges.values():
        bridge.close()
    return counts


if __name__ == "__main__":
    mode, host, ports, keys_dir = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3].split(",")], sys.argv[4]
    print(json.dumps({"link": link, "gui": gui}[mode](host, ports, keys_dir)), flush=True)
