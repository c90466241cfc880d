"""The next RECAP iteration's data: episodes of a (guided) flow policy on the sim env, into the run's replay store.

`robo-rl eval` evaluates training checkpoints and `robo-rl record` records a person's teleoperation; neither acts
with a `bc/policy.pt`-style generative checkpoint and writes a replay store, so this does both: it runs the policy
(sampled with its own guidance scale, or `guidance=` given), writes every episode to `<run>/replay/online/` (a new
source `collect_<n>` per call, so earlier attempts stay and keys stay unique) and reports success with its Wilson
interval. `store=false` only evaluates.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from policies.base import ChunkedBase
from policies.checkpoint import GENERATIVE_KIND, read_bc_checkpoint
from policies.flow import load_generative_base
from robo_rl.config import ConfigError
from robo_rl.data.demos import rollout_episode
from robo_rl.data.learner_replay import online_store_root
from robo_rl.data.schema import fields_for_env, stack_records
from robo_rl.data.storage import SegmentStore
from robo_rl.data.tasks import TaskTable
from robo_rl.eval.wilson import wilson_interval


def load_acting_base(path: Path, env, guidance: float | None = None, task: str | None = None):
    """A generative checkpoint (or a SmolVLA's pretrained_model folder: robo_rl/offline/recap_vla.py) as a frozen
    base for `env`, at guidance `guidance` when given (an advantage-conditioned one; others refuse a scale other than
    1). `task`: a VLA's task text where the env's observation has no instruction."""
    from robo_rl.offline.recap_vla import is_vla, load_guided_vla

    if is_vla(path):
        return load_guided_vla(path, env, guidance, task)
    payload = read_bc_checkpoint(path)
    if payload["kind"] != GENERATIVE_KIND:
        raise ConfigError(f"recap collects with a flow or diffusion policy; {path} is an MLP policy")
    base = load_generative_base(
        payload, env.observation_space, env.action_space.shape[0], getattr(env, "state_names", None)
    )
    if guidance is not None:
        if base.model.advantage is None and guidance != 1.0:
            raise ConfigError(f"guidance={guidance}: {path} is not advantage-conditioned (run recap finetune first)")
        base.model.guidance = float(guidance)
    return base


def next_source(store: SegmentStore) -> str:
    """`collect_<n>`, n one more than the collections already in the store."""
    taken = {s for seg in store.segments for s in seg.sources if s.startswith("collect_")}
    return f"collect_{len(taken) + 1}"


def collect(env, base, episodes: int, seed: int, run_dir: Path | None, progress: bool = True) -> dict:
    """Run `episodes` episodes (seeds seed, seed+1, ...; the policy's noise reseeded from each) and, with a
    `run_dir`, append them to its online store; the success rate with its Wilson interval."""
    chunked = ChunkedBase(base, base.execute_steps)
    fields = fields_for_env(env)
    store = SegmentStore(online_store_root(run_dir), fields) if run_dir is not None else None
    tasks = TaskTable(store.tasks if store is not None else None)
    source = next_source(store) if store is not None else "eval"
    successes, lengths, start = [], [], time.perf_counter()
    for i in tqdm(range(episodes), desc="recap collect", unit="ep", disable=not progress):
        chunked.reset()
        base.reseed(seed + i)
        records, success = rollout_episode(env, chunked.act, seed + i, i, tasks=tasks)
        successes.append(bool(success))
        lengths.append(len(records) - 1)
        if store is not None:  # each episode on disk before the next starts: a stop loses at most one
            store.save_tasks(tasks.names)
            store.write(stack_records(records, fields), np.full(len(records), source, dtype=object))
    k, n = sum(successes), len(successes)
    low, high = wilson_interval(k, n)
    return {
        "episodes": n,
        "successes": k,
        "success_rate": k / n if n else 0.0,
        "success_ci95": [low, high],
        "mean_length": float(np.mean(lengths)) if lengths else 0.0,
        "source": source,
        "store": str(store.root) if store is not None else None,
        "collect_s": time.perf_counter() - start,
    }
