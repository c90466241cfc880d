"""A hostile process that speaks plain ZeroMQ and msgpack to a running learner; it imports no robo_rl code.

    python tests/foreign_peer.py --ports DATA WEIGHTS CTRL --run RUN_FOLDER

It waits until the learner has stored a segment of the real actor's data in the run folder, reads the actor's
id and session from it (as any process that can read the folder can), then sends about a hundred hand-made
message kinds: malformed headers, hostile array specs, fields of the wrong type, a hello and data under the
real actor's id and session (forged), a bye and heartbeats for it from another connection. Forged records
carry a state of FORGED_STATE everywhere, so the test can tell whether any were stored. Prints one JSON line.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

FORGED_STATE = 12345.0
V = 3  # the protocol version it imitates: codec.PROTOCOL_VERSION (checked by test_wire_identity, not imported)


def header(kind, meta, arrays=(), v=V) -> bytes:
    return msgpack.packb({"v": v, "kind": kind, "meta": meta, "arrays": list(arrays)}, use_bin_type=True)


def stolen_session(run: Path, timeout_s: float = 60.0) -> tuple[str, int, int]:
    """(actor id, session, last seq) from the newest segment header in the run folder."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for seg in sorted((run / "replay" / "online").glob("seg_*.rrs")):
            raw = seg.read_bytes()
            start = raw.index(b"{")
            head, _ = json.JSONDecoder().raw_decode(raw[start:].decode("latin-1"))
            for actor, (session, seq) in head["seqs"].items():
                return actor, session, seq
        time.sleep(0.05)
    raise SystemExit("no segment appeared in the run folder")


def forged_batch(n: int, state_dim: int, action_dim: int) -> list[tuple[list, bytes]]:
    """A step batch of the usual fields whose every number is FORGED_STATE."""
    fields = {
        "episode_id": ("<i8", []),
        "step": ("<i4", []),
        "state": ("<f4", [state_dim]),
        "action_executed": ("<f4", [action_dim]),
        "action_policy": ("<f4", [action_dim]),
        "action_base": ("<f4", [action_dim]),
        "reward": ("<f4", []),
        "terminated": ("|b1", []),
        "truncated": ("|b1", []),
        "intervention": ("|b1", []),
        "success": ("|b1", []),
        "ended_by": ("|i1", []),
        "policy_version": ("<i8", []),
        "timestamp": ("<f8", []),
        "task": ("<i4", []),
    }
    out = []
    for name, (dtype, shape) in fields.items():
        value = FORGED_STATE if dtype[1] == "f" else 0 if name == "task" else 1  # task 0: no instruction to carry
        a = np.full((n, *shape), value, np.dtype(dtype))
        out.append(([name, dtype, [n, *shape]], a.tobytes()))
    return out


def data_messages(actor: str, session: int, seq: int, state_dim: int, action_dim: int) -> list[list[bytes]]:
    good = forged_batch(3, state_dim, action_dim)
    specs, frames = [s for s, _ in good], [f for _, f in good]
    steps = {"actor": actor, "session": session, "seq": seq + 1, "token": "f" * 32}
    msgs = [
        [b""],
        [b"\xc1"],
        [b"\x00" * 100],
        [msgpack.packb([1, 2, 3])],
        [msgpack.packb(None)],
        [header("steps", [])] + frames,
        [header("steps", None)] + frames,
        [header("steps", 5)] + frames,
        [header("steps", "meta")] + frames,
        [header(7, steps, specs)] + frames,
        [header(None, steps, specs)] + frames,
        [header("steps", steps, specs, v=99)] + frames,
        [header("steps", steps, specs, v="2")] + frames,
        [msgpack.packb({"kind": "steps", "meta": steps, "arrays": specs})] + frames,
        [header("steps", steps, specs)] + frames[:-1],
        [header("steps", steps, specs)] + frames + [b"extra"],
        [header("steps", steps, [[["list name"], "<f4", [1]]]), b"\0" * 4],
        [header("steps", steps, [[{"map": 1}, "<f4", [1]]]), b"\0" * 4],
        [header("steps", steps, [[7, "<f4", [1]]]), b"\0" * 4],
        [header("steps", steps, [["x", "<f4", [-1]]]), b""],
        [header("steps", steps, [["x", "<f4", [-4, -2]]]), b"\0" * 32],
        [header("steps", steps, [["x", "<f4", [2**32, 2**32, 2**32]]]), b""],  # the product wraps to 0 in int64
        [header("steps", steps, [["x", "<u1", [2**63 - 1, 2]]]), b""],
        [header("steps", steps, [["x", "<f4", [1.5]]]), b"\0" * 4],
        [header("steps", steps, [["x", "<f4", ["3"]]]), b"\0" * 12],
        [header("steps", steps, [["x", "<f4", 3]]), b"\0" * 12],
        [header("steps", steps, [["x", "<f4", [1] * 40]]), b"\0" * 4],
        [header("steps", steps, [["x", "|O", [1]]]), b"\0" * 8],
        [header("steps", steps, [["x", "<U4", [1]]]), b"\0" * 16],
        [header("steps", steps, [["x", "V8", [1]]]), b"\0" * 8],
        [header("steps", steps, [["x", ["<f4"], [1]]]), b"\0" * 4],
        [header("steps", steps, [["x", "<f4"]]), b"\0" * 4],
        [header("steps", steps, [["x", "<f4", [1]], ["x", "<f4", [1]]]), b"\0" * 4, b"\0" * 4],
        [header("steps", steps, ["not a spec"]), b"\0"],
    ]
    for key, bad in [
        ("seq", "7"),
        ("seq", 1.0),
        ("seq", -5),
        ("seq", 0),
        ("seq", [1]),
        ("seq", None),
        ("session", "x"),
        ("session", [session]),
        ("session", 2.5),
        ("actor", ["a"]),
        ("actor", b"a"),
        ("actor", ""),
        ("actor", "x" * 500),
        ("actor", 5),
        ("token", 5),
        ("token", None),
        ("token", "t" * 100),
        ("policy_version", "v"),
    ]:
        msgs.append([header("steps", {**steps, key: bad}, specs)] + frames)
    for key in ("actor", "session", "seq", "token"):
        msgs.append([header("steps", {k: v for k, v in steps.items() if k != key}, specs)] + frames)
    # scalar fields sent as 0-d arrays: the counts of records disagree with the shapes the replay expects
    zero_d = [([s[0], s[1], []], f[: np.dtype(s[1]).itemsize]) for s, f in good]
    msgs.append([header("steps", steps, [s for s, _ in zero_d])] + [f for _, f in zero_d])
    # the forgery: the real actor's id, session and next message numbers, with a guessed token
    for i in range(1, 6):
        msgs.append([header("steps", {**steps, "seq": seq + i}, specs)] + frames)
    return msgs


def ctrl_messages(actor: str, session: int) -> list[list[bytes]]:
    hello = {"actor": actor, "session": session, "token": "f" * 32, "first_unacked": 1, "config_hash": "?"}
    msgs = [
        [b""],
        [b"\xc1\xc1"],
        [header("hello", [])],
        [header("hello", None)],
        [header("hello", 1)],
        [header("heartbeat", [])],
        [header("heartbeat", None)],
        [header("bye", [])],
        [header("bye", None)],
        [header("welcome", {"acked": 1})],
        [header("stop", {"reason": "x"})],
    ]
    for key, bad in [
        ("config_hash", 5),
        ("first_unacked", "1"),
        ("first_unacked", -1),
        ("first_unacked", 0),
        ("first_unacked", 2**64 - 1),
        ("session", [1]),
        ("session", "s"),
        ("actor", None),
        ("actor", {"a": 1}),
        ("token", b"t"),
    ]:
        msgs.append([header("hello", {**hello, key: bad})])
    msgs.append([header("hello", hello)])  # the stolen session with a guessed token (and a wrong config hash)
    for stats in [
        {"x": b"bytes"},
        {"x": [1, 2]},
        {"x": {"deep": {"er": 1}}},
        [1, 2],
        "stats",
        None,
        5,
        {str(i): i for i in range(500)},
        {"x": "y" * 10_000},
        {b"k": 1},
    ]:
        msgs.append([header("heartbeat", {"actor": actor, "stats": stats})])
    msgs.append([header("heartbeat", {"actor": actor, "stats": {"unacked": 0}})])  # a well-formed one, not its own
    msgs.append([header("bye", {"actor": actor, "reason": "impostor"})])  # would mark the real actor gone
    msgs.append([header("heartbeat", {"actor": 5})])
    msgs.append([header("bye", {"actor": [actor]})])
    return msgs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ports", type=int, nargs=3, required=True)
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--state-dim", type=int, default=4)
    p.add_argument("--action-dim", type=int, default=2)
    args = p.parse_args()
    actor, session, seq = stolen_session(args.run)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{args.ports[0]}")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, f"{actor}#impostor".encode())
    dealer.connect(f"tcp://127.0.0.1:{args.ports[2]}")
    data, ctrl = data_messages(actor, session, seq, args.state_dim, args.action_dim), ctrl_messages(actor, session)
    for msg in data:
        push.send_multipart(msg)
    for msg in ctrl:
        dealer.send_multipart(msg)
        time.sleep(0.002)
    replies = []
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if dealer.poll(100):
            frames = dealer.recv_multipart()
            replies.append(msgpack.unpackb(frames[0]).get("kind"))
    ctx.destroy(linger=2000)
    print(json.dumps({"sent": len(data) + len(ctrl), "data": len(data), "ctrl": len(ctrl), "replies": replies}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
