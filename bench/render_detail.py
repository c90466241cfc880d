"""Camera rendering on a CPU: the pick task's arm drawn with its full visual meshes (198k faces) against the decimated
meshes it draws by default (`env.mesh_detail=0.3`), on an idle machine and on a busy one, measured in the same run.

MuJoCo renders offscreen through EGL; on a machine without a GPU that is Mesa's llvmpipe, which transforms every
vertex of every mesh for every image however small the image. This bench times what the pick task's actor does per
control step: a physics step and its two cameras (`front`, `wrist`, 64x64), paced at the control rate (10 Hz), each
setting in its own process; "busy" starts `--busy` spinning processes beside it (at the same priority), as an actor
shares a 2-core machine with its learner, a second robot's actor and a browser. Per setting: the render time per
step (p50, p99), the process's CPU time per render, and the images' mean absolute difference from full detail.

    python bench/render_detail.py            # 30 s per setting, four settings (about 2.5 minutes)
    python bench/render_detail.py --quick    # 8 s per setting

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import write_result  # noqa: E402

DETAILS = {"full": 1.0, "decimated": 0.3}  # env.mesh_detail: ours is robo_rl's default (sim/pick_cube.py MESH_DETAIL)


def measure(seconds: float, control_hz: float, detail: float) -> dict:
    """In this process: step the pick env (cameras front and wrist at 64x64, meshes at `detail`) at `control_hz` for
    `seconds`, timing the two renders of each step; and the first frames, to compare across settings."""
    import numpy as np

    os.environ.setdefault("MUJOCO_GL", "egl")
    from sim.pick_cube import PickCubeEnv

    env = PickCubeEnv(cameras=["front", "wrist"], image_size=64, mesh_detail=detail)
    render_ms, cpu_ms = [], []
    render = env.unwrapped._render

    def timed_render():  # the env's own render of its cameras, inside its step
        c0, t0 = time.process_time(), time.perf_counter()
        images = render()
        render_ms.append((time.perf_counter() - t0) * 1e3)
        cpu_ms.append((time.process_time() - c0) * 1e3)
        return images

    env.unwrapped._render = timed_render
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    frames = [obs["images"][c] for c in ("front", "wrist")]
    render_ms.clear(), cpu_ms.clear()
    period, start = 1.0 / control_hz, time.monotonic()
    next_tick = start
    while time.monotonic() - start < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
        next_tick = max(next_tick + period, time.monotonic())
        time.sleep(max(0.0, next_tick - time.monotonic()))
    env.close()
    r, c = np.asarray(render_ms), np.asarray(cpu_ms)
    return {
        "steps": len(r),
        "render_ms_p50": float(np.percentile(r, 50)),
        "render_ms_p99": float(np.percentile(r, 99)),
        "render_ms_max": float(r.max()),
        "cpu_ms_per_step": float(c.mean()),
        "first_frames": np.stack(frames).tolist(),
    }


def run_setting(detail: float, busy: int, seconds: float, control_hz: float) -> dict:
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL) for _ in range(busy)
    ]
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(seconds), str(control_hz), str(detail)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(measure(*map(float, sys.argv[2:]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 s per setting")
    parser.add_argument("--seconds", type=float, help="seconds per setting (default 30; --quick 8)")
    parser.add_argument("--busy", type=int, default=3, help="spinning processes beside it in the busy settings")
    parser.add_argument("--control-hz", type=float, default=10.0)
    args = parser.parse_args()
    seconds = args.seconds or (8.0 if args.quick else 30.0)
    results: dict[str, dict] = {}
    for load, busy in (("idle", 0), ("busy", args.busy)):
        for name, detail in DETAILS.items():
            r = run_setting(detail, busy, seconds, args.control_hz)
            results[f"{name}_{load}"] = r
            print(
                f"{name:10s} {load:4s}: render p50 {r['render_ms_p50']:6.2f} ms, p99 {r['render_ms_p99']:7.2f} ms, "
                f"max {r['render_ms_max']:7.2f} ms, CPU {r['cpu_ms_per_step']:5.2f} ms/step ({r['steps']} steps)",
                flush=True,
            )
    import numpy as np

    full_frames = np.asarray(results["full_idle"]["first_frames"], int)
    for r in results.values():
        r["mean_abs_pixel_diff_vs_full"] = float(np.abs(np.asarray(r.pop("first_frames"), int) - full_frames).mean())
    ratios = {
        load: {
            "render_p50": results[f"full_{load}"]["render_ms_p50"] / results[f"decimated_{load}"]["render_ms_p50"],
            "render_p99": results[f"full_{load}"]["render_ms_p99"] / results[f"decimated_{load}"]["render_ms_p99"],
            "cpu": results[f"full_{load}"]["cpu_ms_per_step"] / results[f"decimated_{load}"]["cpu_ms_per_step"],
        }
        for load in ("idle", "busy")
    }
    for load, ratio in ratios.items():
        print(
            f"{load}: full / decimated: render p50 {ratio['render_p50']:.1f}x, p99 {ratio['render_p99']:.1f}x, "
            f"CPU {ratio['cpu']:.1f}x; pixels differ by "
            f"{results[f'decimated_{load}']['mean_abs_pixel_diff_vs_full']:.2f} of 255 on average"
        )
    result = {
        "seconds_per_setting": seconds,
        "busy_processes": args.busy,
        "control_hz": args.control_hz,
        "cameras": ["front", "wrist"],
        "image_size": 64,
        "settings": results,
        "mesh_detail": DETAILS,
        "full_over_decimated": ratios,
        "load_avg_1min_at_end": os.getloadavg()[0],
    }
    path = write_result(
        "render_detail",
        result,
        quick=args.quick,
        measured_code=["bench/render_detail.py", "sim", "robo_rl/envs/render.py"],
    )
    print(json.dumps({"result": str(path), **result}))


if __name__ == "__main__":
    main()
