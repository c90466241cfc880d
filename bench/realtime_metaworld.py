"""bench/realtime.py's measurement on a Meta-World task: reach-v3 from state at Meta-World's own 80 Hz, where a 300 ms
chunk is 24 control periods late (25 steps of delay once measured), so a chunk must be long: a flow policy cloned from
30 of the task's scripted demonstrations with chunks of 64, 8 run per chunk (`robo-rl bc policy=flow`), slowed to
300 ms per chunk, under sync, async and rtc, beside the reference (the same policy at its own speed under sync); the
modes take turns on the same seeds. The figures and their meaning are bench/realtime.py's.

    python bench/realtime_metaworld.py          # 10 episodes per mode and the training: ~10 min on 2 cores
    python bench/realtime_metaworld.py --quick  # 2 episodes per mode, a 150-epoch policy
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# this file's folder first on the path would make `import metaworld` resolve here: the package must win
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402
from bench.realtime import LATENCY_S, MODES, flow_base, flow_config, measure, table, verdicts  # noqa: E402

TASK, HORIZON = "reach-v3", 150  # the expert reaches in 40-120 steps
CHUNK, EXECUTE = 64, 8  # 0.8 s of actions at 80 Hz; a 25-step delay leaves 39 to run and to overlap


def config(work: Path, quick: bool):
    """bench/realtime.py's flow recipe on reach-v3, with a chunk long enough for a 300 ms delay at 80 Hz."""
    return flow_config(
        work, quick, CHUNK, EXECUTE, "env=metaworld", f"env.task={TASK}", f"env.max_episode_steps={HORIZON}"
    )


def main() -> None:
    import torch

    from robo_rl.config import make_env
    from robo_rl.offline.bc import train_bc

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per mode (default 10; quick 2)")
    parser.add_argument("--checkpoint", default=None, help="a flow checkpoint cloned on reach-v3 with chunks of 64")
    args = parser.parse_args()
    episodes = args.episodes or (2 if args.quick else 10)
    torch.set_num_threads(1)
    started, load_start = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(Path(tmp), args.quick)
        start = time.perf_counter()
        checkpoint = args.checkpoint or train_bc(cfg, Path(tmp) / "flow", progress=False)["checkpoint"]
        train_s = time.perf_counter() - start
        env = make_env(cfg)
        try:
            flow = flow_base(checkpoint, env)
            figures = measure(flow, env, EXECUTE, LATENCY_S, MODES, episodes, True, reference=flow)
        finally:
            env.close()
    table(f"{TASK} at {env.control_hz:.0f} Hz", figures)
    record = {
        "task": TASK,
        "latency_s": LATENCY_S,
        "control_hz": env.control_hz,
        "chunk": [CHUNK, EXECUTE],
        "train_s": None if args.checkpoint else round(train_s, 1),
        "load_avg_1_5_15_at_start": [round(x, 2) for x in load_start],
        "wall_s": round(time.time() - started, 1),
        "results": {**figures, "targets": verdicts(figures)},
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    name = "realtime_metaworld" if args.quick else f"realtime_metaworld_{time.strftime('%Y_%m_%d')}_{commit.strip()}"
    path = write_result(name, record, args.quick, measured_code=["bench/realtime.py", "policies", "robo_rl"])
    print(f"\nwritten to {path}")
    print(json.dumps(record["results"]["targets"]))


if __name__ == "__main__":
    main()
