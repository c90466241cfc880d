"""The flow bases of a ReinFlow learning benchmark, before any RL, on the learning curve's evaluation protocol:

    python bench/flow_bases.py reinflow_lift_critic_x0std          # seeds 0 1 2, 50 episodes each way
    python bench/flow_bases.py reinflow_lift_critic_x0std --seeds 1 --bc-eval  # and BC's own evaluation
    python bench/flow_bases.py reinflow_lift_critic_x0std --reuse  # again from the bases measured before (gains only)

For each seed, the flow policy `robo-rl train` behaviour-clones for that experiment of bench/learning.py (its
overrides, the seed, the same cached demonstrations: `train_bc`, as `robo-rl train` calls it, so the weights are the
run's own; the checkpoint's SHA-256 is kept to compare). That base is evaluated three ways on the eval seeds
`eval.seed ... eval.seed + N - 1`:
  - `x0_prior`: as bench/learning.py evaluates a checkpoint (`evaluate_policy`, deterministic chain steps), the chain
    policy ReinFlow fine-tunes with x_0 ~ N(0, I) (torch seeded with eval.seed, so the draws repeat);
  - `x0_zero`: the same with x_0 = 0, the prior's mode (no noise anywhere in the chain);
  - `bc_eval`, with `--bc-eval` only: BC's own evaluation (`evaluate_base`, x_0 ~ N(0, I)), the figure `robo-rl train`
    prints for the base (on a loaded 2-core machine each way of 50 Lift episodes takes 6-12 minutes).
N defaults to 50, the episodes of the learning curve's final point (its others use 20: the first 20 of these seeds).
Gains are the learning result file's final success minus each base, in points. Wilson 95% intervals throughout.
Writes bench/results/flow_bases_<experiment>.json; each seed's figures also go to <out>/s<seed>/bases.json, which
`--reuse` reads instead of training and evaluating again (when the learning result file changed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import RESULTS, provenance, write_result  # noqa: E402
from bench.learning import EXPERIMENTS  # noqa: E402


def zero_start(policy) -> None:
    """x_0 = 0 for every chain of `policy`: the initial distribution's mean with zero std."""
    import torch

    initial = policy.initial_mean_std
    policy.initial_mean_std = lambda features: (lambda mean, std: (mean, torch.zeros_like(std)))(*initial(features))


def evaluate_chain(cfg, checkpoint: str, episodes: int, x0: str) -> dict:
    """The ReinFlow chain policy built on `checkpoint` with a prior x_0 (`x0`: "prior" or "zero"), evaluated as
    bench/learning.py evaluates a checkpoint; the per-episode records shortened to a success string."""
    import torch
    from omegaconf import OmegaConf

    from robo_rl.config import make_env, make_policy
    from robo_rl.eval.episodes import evaluate_policy

    cfg = OmegaConf.merge(cfg, {"policy": {"path": checkpoint, "initial_noise": "prior"}})
    env = make_env(cfg)
    try:
        policy = make_policy(cfg, env).eval()
        if x0 == "zero":
            zero_start(policy)
        torch.manual_seed(int(cfg.eval.seed))
        start = time.monotonic()
        result = evaluate_policy(env, policy, episodes, int(cfg.eval.seed))
    finally:
        env.close()
    return summarise(result, time.monotonic() - start)


def summarise(result: dict, wall_s: float | None = None) -> dict:
    """Success, its interval and the episodes' outcomes ("1" a success) of an evaluation."""
    out = {k: result[k] for k in ("episodes", "successes", "success_rate", "success_ci95", "mean_length")}
    out["per_episode_success"] = "".join("1" if r["success"] else "0" for r in result["per_episode"])
    if wall_s is not None:
        out["wall_s"] = round(wall_s, 1)
    return out


def measure_seed(experiment: str, seed: int, episodes: int, folder: Path, bc_eval: bool) -> dict:
    """Clone seed `seed`'s base as `robo-rl train` does for `experiment`, and evaluate it two ways (three with
    `bc_eval`)."""
    import torch
    from omegaconf import OmegaConf

    from robo_rl.config import load_config
    from robo_rl.offline.bc import train_bc

    overrides = EXPERIMENTS[experiment][0]
    # bench/learning.py's train() adds these (ports, outputs and name aside: they do not reach the base)
    cfg = load_config([*overrides, f"seed={seed}", "eval.episodes=1", "logger.progress=false"])
    OmegaConf.update(cfg, "bc.eval_episodes", episodes if bc_eval else 0)
    torch.set_num_threads(1)
    start = time.monotonic()
    summary = train_bc(cfg, folder, progress=False)
    checkpoint = summary["checkpoint"]
    record = {
        "seed": seed,
        "checkpoint": checkpoint,
        "checkpoint_sha256": hashlib.sha256(Path(checkpoint).read_bytes()).hexdigest(),
        "bc_train": {k: summary[k] for k in ("epochs", "updates", "best_epoch", "val_loss", "episodes")},
        "bc_wall_s": round(time.monotonic() - start, 1),
        "eval_seed": int(cfg.eval.seed),
        "x0_prior": evaluate_chain(cfg, checkpoint, episodes, "prior"),
        "x0_zero": evaluate_chain(cfg, checkpoint, episodes, "zero"),
        **provenance(),
    }
    if bc_eval:
        record["bc_eval"] = summarise(json.loads((folder / "bc" / "eval.json").read_text()))
    (folder / "bases.json").write_text(json.dumps(record, indent=1))
    return record


def gains(record: dict, learning: dict | None) -> dict:
    """The learning result's final success of this seed minus each base figure, in points (None without it)."""
    runs = {r["seed"]: r for r in (learning or {}).get("runs", [])}
    run = runs.get(record["seed"])
    if run is None:
        return {"final_success": None, "gain_points": None}
    final = run["curve"][-1]
    return {
        "final_success": final["success"],
        "final_episodes": final["episodes"],
        "final_run": {k: run.get(k) for k in ("run", "date", "commit")},
        "gain_points": {
            way: round(100 * (final["success"] - record[way]["success_rate"]), 1)
            for way in ("x0_prior", "x0_zero", "bc_eval")
            if way in record
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=sorted(e for e in EXPERIMENTS if e.startswith("reinflow_")))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--out", default=str(ROOT / "outputs" / "bench_flow_bases"))
    parser.add_argument("--bc-eval", action="store_true", help="BC's own evaluation of each base too")
    parser.add_argument("--reuse", action="store_true", help="read each seed's bases.json from --out if it is there")
    args = parser.parse_args()
    records = []
    for seed in args.seeds:
        folder = Path(args.out) / args.experiment / f"s{seed}"
        saved = folder / "bases.json"
        if args.reuse and saved.exists():
            record = json.loads(saved.read_text())
            if record["x0_prior"]["episodes"] != args.episodes:
                raise SystemExit(f"--reuse: {saved} has {record['x0_prior']['episodes']} episodes, not {args.episodes}")
        else:
            folder.mkdir(parents=True, exist_ok=True)
            record = measure_seed(args.experiment, seed, args.episodes, folder, args.bc_eval)
        print(
            f"seed {seed}: x0 ~ N(0, I) {record['x0_prior']['success_rate']:.2f}, "
            f"x0 = 0 {record['x0_zero']['success_rate']:.2f}",
            flush=True,
        )
        records.append(record)
    learning_path = RESULTS / f"learning_{args.experiment}.json"
    learning = json.loads(learning_path.read_text()) if learning_path.exists() else None
    runs = [{**r, **gains(r, learning)} for r in records]
    result = {
        "experiment": args.experiment,
        "overrides": EXPERIMENTS[args.experiment][0],
        "seeds": args.seeds,
        "episodes": args.episodes,
        "learning_result": str(learning_path.relative_to(ROOT)) if learning else None,
        "x0_prior_success": [r["x0_prior"]["success_rate"] for r in runs],
        "x0_zero_success": [r["x0_zero"]["success_rate"] for r in runs],
        "bc_eval_success": [r["bc_eval"]["success_rate"] if "bc_eval" in r else None for r in runs],
        "runs": runs,
    }
    path = write_result(f"flow_bases_{args.experiment}", result)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
