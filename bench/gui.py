"""The intervention GUI (issue 14): how old a camera frame is when the browser has it, what the GUI costs the actor's
control loop, and how fast a button on the page reaches the robot.

The GUI runs as its own process (`robo-rl gui`), as with `train gui=true`; Debian's chromium (Playwright, headless)
has the page open. Actor loops run here at 10 Hz in real time: point_reach's env inside the intervention wrapper with
the page's web device, two 64x64 cameras per tick (frames that change every step), through the real bridge
(`robo_rl.gui.bridge`).

  frames    capture → in the browser's JavaScript (a WebSocket opened in the page, beside the page's own), p50/p99,
            with one actor and with four
  jitter    |period − 100 ms| of the loop without the GUI, with it (page open), and without it again: the change must
            stay within the without/without difference (the noise of this machine); and what the bridge's `tick()`
            itself costs the loop per step
  button    Intervene clicked in the page (JavaScript `click()`, its Date.now()) → the first step the env executes
            under the web device, alternately taking over and handing back; held to one period + 30 ms (p99)

    python bench/gui.py            # 30 s per phase
    python bench/gui.py --quick    # within 60 s

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

HZ = 10.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# collects, in the browser, the age of every new frame when its state message arrives
PROBE = """([url]) => new Promise((resolve) => {
  window.__ages = []; const seen = new Set(); const ws = new WebSocket(url);
  ws.onmessage = (e) => { const now = Date.now() / 1000; const m = JSON.parse(e.data);
    if (m.type !== 'state') return;
    for (const a of m.actors) for (const c of a.cameras) { const k = a.id + c.name + c.t;
      if (!seen.has(k)) { seen.add(k); window.__ages.push((now - c.t) * 1000); } } };
  ws.onopen = () => resolve(true); })"""


class Loop:
    """An actor-style 10 Hz loop: the wrapped env's step, a tick to the bridge (when there is one), then sleep."""

    def __init__(self, actor_id: str, zmq_port: int | None) -> None:
        from robo_rl.gui.bridge import GuiBridge, attach_web_device
        from sim.point_reach import PointReachEnv

        self.env, self.web = attach_web_device(PointReachEnv(camera=True, max_episode_steps=10**6))
        self.human = self.env
        self.bridge = (
            GuiBridge(actor_id, "127.0.0.1", zmq_port, self.web, self.human, deadman="continue") if zmq_port else None
        )
        self.rng = np.random.default_rng(0)
        self.starts: list[float] = []
        self.human_steps: list[tuple[float, bool]] = []  # (wall time, executed under the web device)
        self.tick_us: list[float] = []  # what the bridge costs the loop per step (snapshot, frame copies)
        self.stop = threading.Event()

    def run(self, seconds: float) -> None:
        self.env.reset(seed=0)
        period, step, tick = 1.0 / HZ, 0, time.monotonic()
        end = tick + seconds
        while time.monotonic() < end and not self.stop.is_set():
            self.starts.append(time.monotonic())
            _, reward, _, _, info = self.env.step(np.zeros(2, np.float32))
            self.human_steps.append((time.time(), bool(info.get("intervention"))))
            step += 1
            if self.bridge is not None:
                meta = {
                    "mode": "HUMAN" if info.get("intervention") else "POLICY",
                    "policy_version": 0,
                    "episode": 0,
                    "step": step,
                    "reward": float(reward),
                    "return": 0.0,
                    "controller": info.get("intervention_device"),
                }
                frames = None
                if self.bridge.wants_frame():
                    frames = {n: self.rng.integers(0, 255, (64, 64, 3), np.uint8) for n in ("front", "wrist")}
                t = time.perf_counter()
                self.bridge.tick(meta, frames)
                self.tick_us.append((time.perf_counter() - t) * 1e6)
            tick += period
            time.sleep(max(0.0, tick - time.monotonic()))

    def jitter_ms(self) -> np.ndarray:
        return np.abs(np.diff(self.starts) - 1.0 / HZ) * 1e3

    def close(self) -> None:
        if self.bridge is not None:
            self.bridge.close()
        self.env.close()


def _pct(values, q) -> float:
    return round(float(np.percentile(values, q)), 2) if len(values) else float("nan")


def start_gui(http_port: int, zmq_port: int) -> subprocess.Popen:
    import urllib.request

    cmd = [
        sys.executable,
        "-m",
        "robo_rl.cli",
        "gui",
        f"gui.port={http_port}",
        f"gui.zmq_port={zmq_port}",
        "gui.deadman=continue",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=1)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"`{' '.join(cmd)}` exited with {proc.returncode}") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the GUI did not answer within 30 s")


def run_loops(loops: list[Loop], seconds: float) -> None:
    threads = [threading.Thread(target=lp.run, args=(seconds,)) for lp in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def frame_ages(page, loops: list[Loop], seconds: float) -> list[float]:
    page.evaluate("() => { window.__ages = []; }")
    run_loops(loops, seconds)
    return page.evaluate("() => window.__ages")


def button_latency(page, loop: Loop, clicks: int) -> list[float]:
    """Click Intervene, wait for the step executed under (or out of) the web device; alternately on and off."""
    lat = []
    thread = threading.Thread(target=loop.run, args=(clicks * 1.0 + 30,))
    thread.start()
    try:
        time.sleep(1.0)
        sel = '.actor[data-actor="bench-0"] button[data-command="intervention_toggle"]'
        page.locator(sel).wait_for(timeout=10000)
        for i in range(clicks):
            want = i % 2 == 0  # take over, then hand back
            time.sleep(0.3 + 0.2 * np.random.default_rng(i).random())  # a random phase against the loop
            clicked = page.evaluate(
                f"() => {{ const t = Date.now() / 1000; document.querySelector('{sel}').click(); return t; }}"
            )
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                done = [t for t, human in list(loop.human_steps) if t >= clicked and human == want]
                if done:
                    lat.append((done[0] - clicked) * 1e3)
                    break
                time.sleep(0.005)
            else:
                raise RuntimeError(f"click {i} ({'take over' if want else 'hand back'}) was not executed within 5 s")
    finally:
        loop.stop.set()
        thread.join()
    return lat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds, clicks = (6.0, 16) if args.quick else (30.0, 60)
    from playwright.sync_api import sync_playwright

    from robo_rl.transport.link import free_ports

    http_port, zmq_port = free_ports(2)
    gui = start_gui(http_port, zmq_port)
    result: dict = {"control_hz": HZ}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{http_port}/?name=bench")
            page.evaluate(PROBE, [f"ws://127.0.0.1:{http_port}/ws"])

            # jitter: without the GUI, with it, without it again
            jitter = {}
            for name, port in (("without", None), ("with", zmq_port), ("without_again", None)):
                loop = Loop("bench-0", port)
                ages = frame_ages(page, [loop], seconds)
                jitter[name] = loop.jitter_ms()
                if port:
                    result["frames_1_actor"] = {
                        "frames": len(ages),
                        "age_ms_p50": _pct(ages, 50),
                        "age_ms_p99": _pct(ages, 99),
                    }
                    result["bridge_tick_us"] = {"p50": _pct(loop.tick_us, 50), "p99": _pct(loop.tick_us, 99)}
                loop.close()
            noise = abs(_pct(jitter["without"], 99) - _pct(jitter["without_again"], 99))
            change = _pct(jitter["with"], 99) - max(_pct(jitter["without"], 99), _pct(jitter["without_again"], 99))
            result["jitter"] = {
                **{f"{k}_ms_p50": _pct(v, 50) for k, v in jitter.items()},
                **{f"{k}_ms_p99": _pct(v, 99) for k, v in jitter.items()},
                "noise_ms_p99": round(noise, 2),
                "change_ms_p99": round(change, 2),
                "within_noise": bool(change <= max(noise, 1.0)),
            }

            loops = [Loop(f"bench-{i}", zmq_port) for i in range(4)]
            ages = frame_ages(page, loops, seconds)
            result["frames_4_actors"] = {
                "frames": len(ages),
                "age_ms_p50": _pct(ages, 50),
                "age_ms_p99": _pct(ages, 99),
            }
            for lp in loops:
                lp.close()

            loop = Loop("bench-0", zmq_port)
            lat = button_latency(page, loop, clicks)
            loop.close()
            bound = 1e3 / HZ + 30.0
            result["button"] = {
                "clicks": len(lat),
                "latency_ms_p50": _pct(lat, 50),
                "latency_ms_p99": _pct(lat, 99),
                "bound_ms": bound,
                "met": bool(_pct(lat, 99) <= bound),
            }
            browser.close()
    finally:
        gui.terminate()
        gui.wait(10)
    f1, f4, j, b = result["frames_1_actor"], result["frames_4_actors"], result["jitter"], result["button"]
    print(
        f"frame → browser, 2 cameras at {HZ:.0f} Hz: p50 {f1['age_ms_p50']} ms, p99 {f1['age_ms_p99']} ms "
        f"({f1['frames']} frames); four actors: p50 {f4['age_ms_p50']} ms, p99 {f4['age_ms_p99']} ms"
    )
    print(
        f"loop jitter p99: without the GUI {j['without_ms_p99']} ms, with it {j['with_ms_p99']} ms, without again "
        f"{j['without_again_ms_p99']} ms ({'within' if j['within_noise'] else 'BEYOND'} noise); the bridge's tick "
        f"{result['bridge_tick_us']['p50']} us p50, {result['bridge_tick_us']['p99']} us p99"
    )
    print(
        f"button → executed step: p50 {b['latency_ms_p50']} ms, p99 {b['latency_ms_p99']} ms over {b['clicks']} "
        f"clicks (bound {b['bound_ms']:.0f} ms: {'met' if b['met'] else 'MISSED'})"
    )
    result["load"] = round(os.getloadavg()[0], 2)
    write_result("gui", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
