"""How large must a residual's bound be? The best a residual of bound s could do on a task, measured before training.

For each bound s, the frozen BC base acts and a *clipped oracle* corrects it: at every step the scripted expert's
action minus the base's, in the residual's normalised units (the base's training action range widened by 1 + s,
as `ResidualPolicy` normalises it), clipped to ±s. If even that correction cannot lift the base to the success
a benchmark asks for, no residual of that bound will learn it: the bound, not the learner, is what to change.
The oracle is greedy (it follows the expert's own plan, not the best correction), so its success is a guide, not
an upper limit; a learned residual can do better by taking another route.

Baseline in the same run: the base alone (s = 0) on the same initial states.

    python bench/residual_bound.py residual_lift                  # BC base trained from the experiment's demos
    python bench/residual_bound.py residual_lift --base <run>/bc/policy.pt --scales 0.1 0.2 0.3
    python bench/residual_bound.py residual_pick_cube --quick     # 10 episodes, s = 0 and 0.2 (< 60 s)

The last line is one JSON object (success and Wilson interval per bound, the mean |residual| / s).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import write_result  # noqa: E402
from policies.base import ChunkedBase, action_range  # noqa: E402
from policies.bc import load_bc_base  # noqa: E402
from policies.residual import MIN_HALF_RANGE  # noqa: E402
from robo_rl.config import load_config, make_env, make_expert  # noqa: E402
from robo_rl.eval.episodes import wilson_interval  # noqa: E402


def oracle_success(
    env, base: ChunkedBase, expert, low: np.ndarray, high: np.ndarray, scale: float, episodes: int, seed: int
) -> dict:
    """Base + clip(expert − base) on `episodes` fixed initial states: success, its interval, mean |r| / s."""
    half = np.maximum((high - low) / 2, MIN_HALF_RANGE) * (1 + scale)
    successes, used = 0, []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        base.reset(), expert.reset()
        success = False
        while True:
            b = np.asarray(base.act(obs), np.float32)
            e = np.asarray(expert.act(obs), np.float32)  # called every step: a phase expert tracks its plan
            r = np.clip((e - b) / half, -scale, scale)
            used.append(float(np.abs(r).mean()) / scale if scale > 0 else 0.0)
            obs, reward, terminated, truncated, info = env.step(np.clip(b + half * r, -1.0, 1.0))
            success = success or bool(info.get("success", False))
            if terminated or truncated:
                break
        successes += success
    low_ci, high_ci = wilson_interval(successes, episodes)
    return {
        "scale": scale,
        "success": round(successes / episodes, 4),
        "wilson95": [round(low_ci, 4), round(high_ci, 4)],
        "episodes": episodes,
        "mean_abs_residual_over_s": round(float(np.mean(used)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="an experiment name (launch/conf/experiment), e.g. residual_lift")
    parser.add_argument("--base", help="a `robo-rl bc` checkpoint (default: train one from the experiment's demos)")
    parser.add_argument("--scales", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1000, help="first initial state's seed (not the demos')")
    parser.add_argument("--quick", action="store_true", help="10 episodes, s = 0 and 0.2")
    parser.add_argument("overrides", nargs="*", help="more hydra overrides, e.g. demos.num_episodes=20")
    args = parser.parse_args()
    if args.quick:
        args.scales, args.episodes = [0.0, 0.2], 10
    torch.set_num_threads(1)
    cfg = load_config([f"experiment={args.experiment}", "logger.progress=false", *args.overrides])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.base
        if path is None:
            from robo_rl.offline.bc import train_bc

            if args.quick:
                cfg.bc.eval_episodes, cfg.bc.epochs = 0, min(int(cfg.bc.epochs), 50)
            path = train_bc(cfg, tmp, progress=False)["checkpoint"]
        env = make_env(cfg)
        try:
            inner = load_bc_base(path, env.observation_space, env.action_space.shape[0])
            low, high = action_range(inner) or (-np.ones(env.action_space.shape), np.ones(env.action_space.shape))
            base = ChunkedBase(inner, cfg.policy.base.get("execute_steps"))
            expert = make_expert(cfg, env, noise_std=0.0, seed=0)
            rows = []
            for scale in args.scales:
                rows.append(
                    oracle_success(
                        env, base, expert, np.asarray(low), np.asarray(high), scale, args.episodes, args.seed
                    )
                )
                print(
                    f"s = {scale:.2f}: success {rows[-1]['success']:.2f} {rows[-1]['wilson95']}, "
                    f"mean |r|/s {rows[-1]['mean_abs_residual_over_s']}",
                    flush=True,
                )
        finally:
            env.close()
    base_row = next((r for r in rows if r["scale"] == 0), None)
    out = {
        "bench": "residual_bound",
        "experiment": args.experiment,
        "base": str(args.base or "trained here"),
        "rows": rows,
        "base_alone": base_row["success"] if base_row else None,
        "seconds": round(time.perf_counter() - started, 1),
    }
    write_result(f"residual_bound_{args.experiment}", out, args.quick)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
