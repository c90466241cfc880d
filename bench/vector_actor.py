"""One actor stepping several simulated envs (`actor.num_envs`, issue 16's on-policy runs): env steps per second of
the acting loop with N envs and one batched policy call a step, against one env and one policy call a step (what
an actor with `num_envs=1` does, and what N actor processes each do on their own core).

Policies: ReinFlow (K = 4 noisy Euler steps) and DPPO-style (K = 20 DDIM steps, the last 10 noisy) on the pick
task's flow/diffusion architecture (3×256 MLP, chunk 4, all 4 executed), random weights (the cost of a call does not
depend on them); the pick env from state. Both loops are the actor's own calls (`policy_step` for one env,
`policy_steps` with env slots for several) and each env's episodes are reset as the actor resets them; one torch
thread; the N-env and the one-env loop alternate, `--repeats` times, so that a loaded machine slows both alike.

    python bench/vector_actor.py            # 2,000 env steps per measurement, N = 4, 8, 16; 3 repeats
    python bench/vector_actor.py --quick    # 400 env steps, N = 8, 1 repeat: seconds

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402


def make_policy(method: str, space, action_dim: int):
    from policies.chain import ChainPolicy
    from policies.flow import ChunkGenerator

    kind = "flow" if method == "reinflow" else "diffusion"
    model = ChunkGenerator(space["state"].shape[0], action_dim, chunk_size=4, kind=kind, steps=20)
    if method == "reinflow":
        return ChainPolicy(space, action_dim, method="reinflow", steps=4, generator=model, execute_steps=4)
    return ChainPolicy(
        space,
        action_dim,
        method="dppo",
        steps=20,
        stochastic_steps=10,
        sigma_min=0.1,
        sigma_max=0.1,
        generator=model,
        execute_steps=4,
    )


def act_envs(policy, envs: list, env_steps: int, seed: int) -> tuple[float, float]:
    """(seconds, of which in the policy) for `env_steps` env steps over `envs`, as the actor's loops run them."""
    from robo_rl.policy_io import policy_step, policy_steps

    policy.reset()
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    slots, steps, in_policy = list(range(len(envs))), 0, 0.0
    start = time.perf_counter()
    while steps < env_steps:
        t = time.perf_counter()
        if len(envs) == 1:
            action, _ = policy_step(policy, obs[0], deterministic=False)
            actions = action[None]
        else:
            actions, _ = policy_steps(policy, obs, deterministic=False, slots=slots)
        in_policy += time.perf_counter() - t
        for i, env in enumerate(envs):
            obs[i], _, terminated, truncated, _ = env.step(actions[i])
            steps += 1
            if terminated or truncated:
                obs[i], _ = env.reset()
                policy.reset(i)  # env i's chunk (one env: slot 0, as `policy_step` acts)
    return time.perf_counter() - start, in_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    import torch

    from robo_rl.config import load_config, make_env

    torch.set_num_threads(1)
    env_steps = 400 if args.quick else 2000
    sizes = [8] if args.quick else [4, 8, 16]
    repeats = args.repeats or (1 if args.quick else 3)
    cfg = load_config(["experiment=rlpd"])  # the pick task from state
    envs = [make_env(cfg) for _ in range(max(sizes))]
    space, adim = envs[0].observation_space, envs[0].action_space.shape[0]
    start = time.perf_counter()
    results = {}
    for method in ("reinflow", "dppo"):
        torch.manual_seed(0)
        policy = make_policy(method, space, adim).eval()
        row = {}
        for n in sizes:
            one, many = [], []
            for r in range(repeats):  # alternating: the machine's load falls on both
                one.append(act_envs(policy, envs[:1], env_steps, 1000 * r))
                many.append(act_envs(policy, envs[:n], env_steps, 1000 * r))
            s1, p1 = np.median([x[0] for x in one]), np.median([x[1] for x in one])
            sn, pn = np.median([x[0] for x in many]), np.median([x[1] for x in many])
            row[f"n{n}"] = m = {
                "one_env_steps_per_s": round(env_steps / s1, 1),
                "n_envs_steps_per_s": round(env_steps / sn, 1),
                "speedup": round(s1 / sn, 2),
                "policy_ms_per_env_step_one": round(p1 / env_steps * 1e3, 3),
                "policy_ms_per_env_step_n": round(pn / env_steps * 1e3, 3),
                "policy_speedup": round(p1 / pn, 2),
            }
            print(
                f"{method:>8} N={n:>2}: {m['n_envs_steps_per_s']:.0f} env steps/s against one env's "
                f"{m['one_env_steps_per_s']:.0f} ({m['speedup']:.2f}x); policy per env step "
                f"{m['policy_ms_per_env_step_n']:.3f} ms against {m['policy_ms_per_env_step_one']:.3f} ms "
                f"({m['policy_speedup']:.1f}x)"
            )
        results[method] = row
    for env in envs:
        env.close()
    text = json.dumps(
        {
            "bench": "vector_actor",
            "quick": args.quick,
            "env_steps": env_steps,
            "repeats": repeats,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "wall_s": round(time.perf_counter() - start, 1),
            **results,
        }
    )
    write_result("vector_actor", json.loads(text), args.quick)
    print(text)


if __name__ == "__main__":
    main()
