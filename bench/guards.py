"""What the guards of issue 48 cost a PPO iteration (target: at most 5% of its time).

  ours      `PPO.update` as the learner runs it now, its guards on (the defaults): the recorded log-probabilities
            recomputed at the actor's batch shape (4 policy calls) and compared at the first minibatch's, the ratio
            and KL checked before each backward(), and the learner's `TrainingGuards.update` on its metrics
  off       the same code with the guards set off (algo.log_prob_tolerance=null, algo.skip_log_ratio=null)
  baseline  `PPO.update` as it was before the guards (robo_rl/algos/ppo.py at BASELINE_COMMIT, read from git and
            loaded as its own module), the same weights and data
  iteration the update plus acting the rollout: one policy call per decision at the actor's batch shape
            (`actor.num_envs`, 1 by default), the simulator left out (it would only shrink the guards' share)

Each timed update starts from the same saved state (the check compares with the acting weights' log-probabilities),
in rotating order so a loaded machine slows all alike; medians are reported. The policy: a ReinFlow chain over a
flow network of the default architecture (3 x 256, chunk 8, K = 4 steps; random weights), PPO's defaults (2,000 env
steps a rollout, 4 executed per decision: 500 decisions, 5 epochs of 128). The guards' own pieces are also timed
directly (the recomputation and `TrainingGuards.update`), a figure less noisy than a difference of two medians.

    python bench/guards.py                  # 15 rounds: about a minute on a quiet CPU
    python bench/guards.py --quick          # 3 rounds, a 512-step rollout: seconds
    python bench/guards.py --device cuda    # the update on a GPU

The last line is one JSON object; the file goes to bench/results/guards[_cuda].json.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402
from bench.vla import sync  # noqa: E402 — CUDA synchronised around a timed call

BASELINE_COMMIT = "8519b4d"  # the last commit before the guards: its ppo.py is the baseline
STATE_DIM, ACTION_DIM, CHUNK, EXECUTE = 10, 4, 8, 4


def baseline_ppo_module():
    """robo_rl/algos/ppo.py as it was at BASELINE_COMMIT, loaded as its own module (None without git)."""
    run = subprocess.run(
        ["git", "show", f"{BASELINE_COMMIT}:robo_rl/algos/ppo.py"], cwd=ROOT, capture_output=True, text=True
    )
    if run.returncode != 0:
        return None
    path = Path(tempfile.mkdtemp()) / "ppo_before_guards.py"
    path.write_text(run.stdout)
    spec = importlib.util.spec_from_file_location("ppo_before_guards", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rollout(policy, decisions: int, acting_batch: int, device: str):
    """`decisions` chains acted as an actor acts them (`acting_batch` observations per call): the batch the
    learner hands PPO, and the seconds acting took."""
    import torch

    obs = {"state": torch.rand(decisions, STATE_DIM, device=device) * 2 - 1, "images": {}}
    chains, log_probs = [], []
    sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        for lo in range(0, decisions, acting_batch):
            c, lp = policy.sample_chain({"state": obs["state"][lo : lo + acting_batch], "images": {}})
            chains.append(c)
            log_probs.append(lp)
    sync(device)
    act_s = time.perf_counter() - start
    chain, log_prob = torch.cat(chains), torch.cat(log_probs)
    batch = {
        "obs": obs,
        "next_obs": obs,
        "reward": torch.rand(decisions, device=device),
        "discount": torch.full((decisions,), 0.99**EXECUTE, device=device),
        "truncated": torch.zeros(decisions, dtype=torch.bool, device=device),
        "steps": torch.full((decisions,), EXECUTE, device=device),
        "continues": (torch.arange(decisions, device=device) % 10 != 9),  # episodes of 10 decisions
        "extras": {"chain": chain.flatten(1), "log_prob": log_prob[:, None]},
    }
    return batch, act_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--acting-batch", type=int, default=1, help="actor.num_envs: observations per policy call")
    args = parser.parse_args()
    import torch

    from policies.chain import ChainPolicy
    from policies.flow import ChunkGenerator
    from robo_rl.algos.guards import TrainingGuards
    from robo_rl.algos.ppo import build_ppo
    from robo_rl.configs.run import GuardsConfig
    from robo_rl.envs import make_observation_space

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rounds = args.rounds or (3 if args.quick else 15)
    env_steps = 512 if args.quick else 2000
    decisions = env_steps // EXECUTE
    space = make_observation_space(STATE_DIM, {})
    generator = ChunkGenerator(STATE_DIM, ACTION_DIM, chunk_size=CHUNK, steps=4, hidden=[256, 256, 256])
    policy = ChainPolicy(space, ACTION_DIM, method="reinflow", generator=generator, execute_steps=EXECUTE)
    policy = policy.to(args.device)
    keys = {"rollout_env_steps": env_steps, "batch_size": 128, "epochs": 5}
    algos = {
        "ours": build_ppo(policy, space, ACTION_DIM, **keys),
        "off": build_ppo(policy, space, ACTION_DIM, **keys, log_prob_tolerance=None, skip_log_ratio=None),
    }
    before = baseline_ppo_module()
    if before is not None:
        algos["baseline"] = before.build_ppo(policy, space, ACTION_DIM, **keys)
    for algo in algos.values():
        algo.acting_batch = args.acting_batch
        algo.value.load_state_dict(algos["ours"].value.state_dict())  # one value network's start for all
    state = {name: copy.deepcopy(algo.state_dict()) for name, algo in algos.items()}  # not the live tensors
    batch, act_s = rollout(policy, decisions, args.acting_batch, args.device)
    guards = TrainingGuards(GuardsConfig(), 0.99)
    times = {name: [] for name in algos}
    pieces = {"log_prob_check_s": [], "training_guards_s": []}
    names = list(algos)
    for r in range(rounds + 1):  # round 0 warms every variant up and is not counted
        for name in names[r % len(names) :] + names[: r % len(names)]:
            algos[name].load_state_dict(state[name])
            torch.manual_seed(r)  # the same minibatches for every variant in a round
            sync(args.device)
            start = time.perf_counter()
            metrics = algos[name].update([batch])
            if name == "ours":
                metrics = guards.update(metrics)
            sync(args.device)
            if r:
                times[name].append(time.perf_counter() - start)
        algos["ours"].load_state_dict(state["ours"])
        n = len(batch["reward"])
        chain = batch["extras"]["chain"].view(n, *policy.chain_shape)
        sync(args.device)
        start = time.perf_counter()
        algos["ours"].check_recorded_log_probs(batch["obs"], chain, batch["extras"]["log_prob"].view(n))
        sync(args.device)
        middle = time.perf_counter()
        guards.update(metrics)
        end = time.perf_counter()
        if r:
            pieces["log_prob_check_s"].append(middle - start)
            pieces["training_guards_s"].append(end - middle)
    median = {name: statistics.median(t) for name, t in times.items()}
    reference = median.get("baseline", median["off"])
    direct = sum(statistics.median(t) for t in pieces.values())
    result = {
        "device": args.device,
        "rounds": rounds,
        "env_steps": env_steps,
        "decisions": decisions,
        "acting_batch": args.acting_batch,
        "baseline": f"robo_rl/algos/ppo.py at {BASELINE_COMMIT}" if before is not None else "the guards off",
        "update_s_median": median,
        "update_s_all": times,
        "act_s": act_s,
        "iteration_s": act_s + reference,
        "pieces_s_median": {k: statistics.median(t) for k, t in pieces.items()},
        "ratio_ours_to_baseline_update": median["ours"] / reference,
        "overhead_share_of_update": (median["ours"] - reference) / reference,
        "overhead_share_of_iteration": (median["ours"] - reference) / (act_s + reference),
        "direct_share_of_update": direct / reference,
        "direct_share_of_iteration": direct / (act_s + reference),
        "target_share_of_iteration": 0.05,
    }
    print(
        f"PPO update ({decisions} decisions, {args.device}): ours {median['ours'] * 1e3:.0f} ms, "
        + (f"baseline (before the guards) {median['baseline'] * 1e3:.0f} ms, " if "baseline" in median else "")
        + f"guards off {median['off'] * 1e3:.0f} ms; ours/baseline {result['ratio_ours_to_baseline_update']:.3f}; "
        f"acting the rollout {act_s:.2f} s"
    )
    print(
        f"the guards' own pieces: {direct * 1e3:.1f} ms = {result['direct_share_of_update']:.1%} of the update, "
        f"{result['direct_share_of_iteration']:.1%} of the iteration (target <= 5%); by difference of medians: "
        f"{result['overhead_share_of_update']:+.1%} of the update, {result['overhead_share_of_iteration']:+.1%} of "
        "the iteration"
    )
    path = write_result(
        f"guards{'_cuda' if args.device.startswith('cuda') else ''}",
        result,
        args.quick,
        measured_code=["robo_rl/algos/ppo.py", "robo_rl/algos/guards.py"],
    )
    print(f"written to {path}")
    print(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
