"""Evaluation suites: one policy under a named list of conditions, on the same seeds for every condition and policy.

    robo-rl eval checkpoint=<run> suite=<name or file.yaml> [eval.workers=2] [eval.score=env|human] [env.*=...]
    robo-rl eval compare <run or report> <run or report> ... [suite=<name>] [out=<folder>]
    robo-rl eval sim_vs_real <run> [suite=<name>]       (or: sim_vs_real <sim report> <real report>)

A suite (launch/conf/suite/<name>.yaml) names `episodes`, a first `seed` and `conditions`, each a list of config
overrides applied on top of the run's config. Every condition runs seeds seed .. seed+episodes-1 with the
deterministic policy, in `eval.workers` spawned env processes, each building the env (behind its safety layer) and
the policy from the condition's config and the checkpoint file; they return plain per-episode results over local
queues. Success is the env's own check (`info["success"]`) or a person's label (`eval.score=human`), never the
reward model a policy was trained on. On a real robot (an env with a `driver` that is not a twin) a person resets
the scene by hand between episodes, answering a prompt with a device's success button or Enter; with `gui=true` the
intervention page shows the prompt and its buttons answer it (robo_rl/gui/eval_view.py).

The report goes to <run>/eval/<suite>/ (a real robot's to <suite>_real/): report.json, report.md, report.html (a
bar chart of success with Wilson 95% intervals, failure modes, one success and one failure clip per condition).
"""

from __future__ import annotations

import collections
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robo_rl.config import ConfigError
from robo_rl.eval.behaviour import farmed_reward_check
from robo_rl.eval.conditions import Condition, Suite, SuiteError, is_real_robot_config
from robo_rl.eval.episodes import build_env, load_policy, needs_hand_reset, run_condition
from robo_rl.eval.failures import meanings, mode_names
from robo_rl.eval.film import film_condition
from robo_rl.eval.prompt import EvaluationStopped, HumanPrompt, human_devices
from robo_rl.eval.throughput import throughput
from robo_rl.eval.unseen import seen_part, unseen_overrides
from robo_rl.eval.workers import run_in_workers


@dataclass
class SuiteRun:
    """Per condition its episodes (in seed order), clips and whether a real robot ran it."""

    episodes: list[list[dict]]
    clips: list[dict] = field(default_factory=list)
    real_robot: bool = False
    stopped: str | None = None


def run_suite(
    suite: Suite,
    cfgs: list,
    payload: dict,
    workers: int = 1,
    score: str = "env",
    film: bool = True,
    clip_dir: Path | None = None,
    progress: bool = False,
    prompt: HumanPrompt | None = None,
) -> SuiteRun:
    """Every condition of `suite` (its config in `cfgs`) on the suite's seeds. One worker (and always on a real
    robot or with a person scoring): in this process; more: spawned env processes, each episode once."""
    from tqdm import tqdm

    total = len(cfgs) * suite.episodes
    bar = tqdm(total=total, desc=f"suite {suite.name}", unit="ep", disable=not progress)
    try:
        if workers > 1 and score == "env" and not any(is_real_robot_config(c) for c in cfgs):
            run = SuiteRun(run_in_workers(suite, cfgs, payload, workers, bar))
        else:
            run = _run_in_process(suite, cfgs, payload, score, bar, prompt)
    finally:
        bar.close()
    run.clips = [{} for _ in cfgs]
    if film and clip_dir is not None and not run.real_robot:
        shutil.rmtree(clip_dir, ignore_errors=True)  # an earlier run's clips would show other episodes
        clips = tqdm(
            total=len(cfgs), desc="clips (a success and a failure each)", unit="condition", disable=not progress
        )
        try:
            for i, (cond, cfg) in enumerate(zip(suite.conditions, cfgs, strict=True)):
                clips.set_postfix_str(cond.name, refresh=True)  # filming replays episodes: seconds per condition
                run.clips[i] = film_condition(cfg, payload, cond, run.episodes[i], clip_dir)
                clips.update(1)
        finally:
            clips.close()
    return run


def _run_in_process(suite: Suite, cfgs: list, payload: dict, score: str, bar, prompt) -> SuiteRun:
    from robo_rl.envs.base import SafetyStop

    run = SuiteRun([[] for _ in cfgs])
    try:
        for i, (cond, cfg) in enumerate(zip(suite.conditions, cfgs, strict=True)):
            try:
                env = build_env(cfg, score)
            except ConfigError as e:
                raise SuiteError(f"suite {suite.name}, condition '{cond.name}': {e}") from None
            try:
                run.real_robot = run.real_robot or needs_hand_reset(env)
                if needs_hand_reset(env) or score == "human":  # one prompt for the whole run: stdin has one reader
                    if prompt is None:
                        prompt = HumanPrompt(human_devices(env))
                    elif human_devices(env):
                        prompt.devices = human_devices(env)  # this condition's env has its own devices
                    prompt.gui = getattr(env, "eval_view", None)
                policy = load_policy(cfg, env, payload)
                run_condition(
                    env,
                    policy,
                    suite.seeds(),
                    score,
                    prompt,
                    cond,
                    on_episode=lambda r, out=run.episodes[i]: (out.append(r), bar.update(1)),
                )
            finally:
                if getattr(env, "eval_view", None) is not None:
                    env.eval_view.close()
                env.close()
    except (EvaluationStopped, SafetyStop) as e:
        run.stopped = str(e)
    except KeyboardInterrupt:
        if not run.real_robot:  # a simulator's evaluation is cheap to run again
            raise
        run.stopped = "interrupted (Ctrl-C)"
    return run


# --- statistics ---------------------------------------------------------------------------------------------------


def summarize(cond: Condition, episodes: list[dict], clips: dict | None = None) -> dict:
    """A condition's line of the report: success with its Wilson 95% interval, lengths, wall times, the failure modes
    its task names, throughput and time (robo_rl/eval/throughput.py), the farmed-reward check where a learned reward
    scored the episodes."""
    from robo_rl.eval.per_task import per_instruction
    from robo_rl.eval.wilson import wilson_interval

    n, k = len(episodes), sum(r["success"] for r in episodes)
    low, high = wilson_interval(k, n)
    mean = lambda key: float(np.mean([r[key] for r in episodes])) if episodes else float("nan")  # noqa: E731
    tasks = list(dict.fromkeys(r.get("task") for r in episodes))
    modes = {
        **dict.fromkeys(mode_names(tasks), 0),
        **collections.Counter(r["failure_mode"] for r in episodes if r["failure_mode"] is not None),
    }
    ended = dict(collections.Counter(r["ended_by"] for r in episodes))
    known = episodes and all("cameras" in r for r in episodes)  # a report from before they were recorded: unknown
    cameras = sorted({cam for r in episodes for cam in r["cameras"]}) if known else None
    unseen = unseen_overrides(list(cond.overrides), cameras)
    return {
        "name": cond.name,
        "overrides": list(cond.overrides),
        "setup": cond.setup,
        "n": n,
        "successes": k,
        "success_rate": k / n if n else float("nan"),
        "success_ci95": [low, high],
        "mean_length": mean("length"),
        "mean_return": mean("return"),
        "episode_s": mean("episode_s"),
        "step_ms": mean("step_ms"),
        "failure_modes": modes,
        "failure_mode_meanings": meanings(tasks),
        "tasks": [t for t in tasks if t is not None],
        "throughput": throughput(episodes, any(r.get("real_robot") for r in episodes)),
        "farmed_reward": farmed_reward_check(episodes),
        "ended_by": ended,
        "intervention_steps": sum(r["interventions"] for r in episodes),
        "seeds": [r["seed"] for r in episodes],
        "cameras": cameras,
        "not_seen": unseen,
        "seen": seen_part(list(cond.overrides), unseen),
        "clips": clips or {},
        "episodes": episodes,
        **({"per_instruction": by} if (by := per_instruction(episodes)) else {}),  # a multi-task env's, per task
    }


# --- reports ------------------------------------------------------------------------------------------------------


# --- comparisons --------------------------------------------------------------------------------------------------
