"""Evaluation workers: spawned env processes, each building the env (behind its safety layer) and the policy from a
condition's config and the checkpoint file, returning plain per-episode results over local queues."""

from __future__ import annotations

import math
import queue

from robo_rl.config import ConfigError
from robo_rl.eval.conditions import Suite
from robo_rl.eval.episodes import build_env, load_policy, run_episode

WORKER_POLL_S = 1.0  # how often the parent checks that its workers are alive while it waits for results


def run_in_workers(suite: Suite, cfgs: list, payload: dict, workers: int, bar) -> list[list[dict]]:
    """Chunks of (condition, episodes) to `workers` spawned processes; results come back episode by episode."""
    import multiprocessing

    from omegaconf import OmegaConf

    ctx = multiprocessing.get_context("spawn")  # no forked torch/MuJoCo/OpenGL state
    tasks, results = ctx.Queue(), ctx.Queue()
    chunk = math.ceil(suite.episodes / workers)
    for c, cfg in enumerate(cfgs):
        text = OmegaConf.to_yaml(cfg, resolve=True)
        for start in range(0, suite.episodes, chunk):
            tasks.put((c, text, [(i, suite.seed + i) for i in range(start, min(suite.episodes, start + chunk))]))
    for _ in range(workers):
        tasks.put(None)
    threads = int(OmegaConf.select(cfgs[0], "torch_threads", default=1))
    procs = [
        ctx.Process(
            target=_worker, args=(tasks, results, payload["path"], threads), daemon=True, name=f"eval-worker-{k}"
        )
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    out: list[list[dict | None]] = [[None] * suite.episodes for _ in cfgs]
    left, quiet_after_exit = len(cfgs) * suite.episodes, 0
    try:
        while left:
            try:
                message = results.get(timeout=WORKER_POLL_S)
            except queue.Empty:
                dead = next((p for p in procs if p.exitcode not in (None, 0)), None)
                if dead is not None:
                    raise RuntimeError(
                        f"{dead.name} died (exit code {dead.exitcode}) with {left} episodes left"
                    ) from None
                quiet_after_exit += all(p.exitcode == 0 for p in procs)  # their last results may still be in the pipe
                if quiet_after_exit > 1:
                    raise RuntimeError(f"the evaluation workers ended with {left} episodes left") from None
                continue
            if message[0] == "error":
                _, c, kind, text = message
                where = f"suite {suite.name}, condition '{suite.conditions[c].name}': " if c is not None else ""
                raise _worker_error(kind, where + text)
            _, c, result = message
            out[c][result["episode"]] = result
            left -= 1
            bar.update(1)
    finally:
        for p in procs:
            p.join(timeout=5.0 if not left else 0.1)
            if p.is_alive():
                p.terminate()
                p.join()
        tasks.cancel_join_thread()  # tasks no worker will read would otherwise hold this process at exit, unflushed
    return out  # type: ignore[return-value]


def _worker(tasks, results, checkpoint: str, torch_threads: int) -> None:
    """An env process: builds each task's condition (env + policy) once and runs its episodes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
    from robo_rl.quiet import quiet_library_noise

    quiet_library_noise()  # a spawned interpreter: the library lines would land inside the parent's progress bar
    import torch
    from omegaconf import OmegaConf

    from robo_rl.runs import load_checkpoint

    torch.set_num_threads(torch_threads)
    built, env, c = None, None, None
    try:
        payload = load_checkpoint(checkpoint)
        while (task := tasks.get()) is not None:
            c, text, episodes = task
            if built != c:
                if env is not None:
                    env.close()
                env = None
                cfg = OmegaConf.create(text)
                env = build_env(cfg)
                policy, built = load_policy(cfg, env, payload), c
            for i, seed in episodes:
                results.put(("episode", c, run_episode(env, policy, seed, i)[0]))
    except Exception as e:  # noqa: BLE001 - the parent says it in one line
        results.put(("error", c, type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else repr(e)))
    finally:
        if env is not None:
            env.close()


def _worker_error(kind: str, text: str) -> Exception:
    from robo_rl.runs import CheckpointError

    if kind == "CheckpointError":
        return CheckpointError(text)
    if kind in ("ConfigError", "VideoError", "SuiteError"):
        return ConfigError(text)
    return RuntimeError(f"evaluation worker: {kind}: {text}")
