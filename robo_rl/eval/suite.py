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
import datetime
import difflib
import json
import math
import queue
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robo_rl.config import CONF_DIR, ConfigError
from robo_rl.errors import UserError
from robo_rl.eval.report import (
    FAILURE_MODES,
    ci_text,
    compare_markdown,
    compare_reports,
    header_lines,
    write_comparison,
    write_suite_report,
)

SUITE_DIR = CONF_DIR / "suite"
SCORES = ("env", "human")
SAFETY_ENDINGS = ("safety", "estop")  # ended_by values that mean the robot was stopped
HUMAN_LABELS = {"human_success": True, "human_failure": False}
CLIP_SIZE_PX = 96  # longest side of a report clip
CLIP_MAX_FRAMES = 60  # a longer episode is subsampled evenly (its first and last frame kept)
PROMPT_POLL_S = 0.05  # how often devices are read while a prompt waits for a person
WORKER_POLL_S = 1.0  # how often the parent checks that its workers are alive while it waits for results
NOT_OUTCOME_KEYS = ("logger.", "torch_threads", "outputs_dir", "cache_dir", "name=")  # a report stays reusable
TIMING_KEYS = ("episode_s", "step_ms")  # per-episode fields that differ run to run (wall time)
EVAL_KEYS = ("eval.suite", "eval.workers", "eval.score", "eval.video", "eval.episodes", "eval.seed")
REWARD_REFUSAL = (
    "eval.score=reward is refused: a policy scored by the reward model it was trained on is graded by "
    "the critic it learned to please (and may have learned to fool); use eval.score=env (the env's own "
    "success check) or eval.score=human (a person's labels)"
)


class SuiteError(UserError, ValueError):
    """A suite, a condition or an evaluation request a user can fix; the text names it."""


class PromptError(SuiteError):
    """A person's answer is needed and nothing can give it (no device, stdin closed)."""


# --- suites -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    name: str
    overrides: tuple[str, ...] = ()
    setup: str | None = None  # what a person changes by hand for this condition on a real robot


@dataclass(frozen=True)
class Suite:
    name: str
    episodes: int
    seed: int
    conditions: tuple[Condition, ...]
    source: str = ""

    def seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.episodes))

    def signature(self) -> dict:
        """What two evaluations must share to be compared episode for episode."""
        return {
            "suite": self.name,
            "episodes": self.episodes,
            "seed": self.seed,
            "conditions": [[c.name, list(c.overrides)] for c in self.conditions],
        }


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def load_suite(spec: str) -> Suite:
    """A suite by name (launch/conf/suite/<name>.yaml) or by path; any problem is one line naming it."""
    import yaml

    path = Path(spec)
    if path.suffix not in (".yaml", ".yml"):
        path = SUITE_DIR / f"{spec}.yaml"
        if not path.is_file():
            close = difflib.get_close_matches(spec, suite_names(), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SuiteError(
                f"no suite '{spec}'{hint} (the suites: {', '.join(suite_names())}; or a path to a suite .yaml)"
            )
    elif not path.is_file():
        raise SuiteError(f"suite file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SuiteError(f"suite {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    where = f"suite {path}"
    if not isinstance(data, dict):
        raise SuiteError(f"{where}: must be a mapping with name, episodes, seed and conditions")
    unknown = set(data) - {"name", "episodes", "seed", "conditions"}
    if unknown:
        raise SuiteError(f"{where}: unknown keys {sorted(unknown)} (known: name, episodes, seed, conditions)")
    name, episodes, seed = data.get("name", path.stem), data.get("episodes"), data.get("seed", 0)
    if not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name):
        raise SuiteError(f"{where}: name must be letters, digits, '_', '.' or '-', got {name!r}")
    for key, value, low in (("episodes", episodes, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise SuiteError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
    conditions = data.get("conditions")
    if not isinstance(conditions, list) or not conditions:
        raise SuiteError(f"{where}: conditions must be a non-empty list of {{name, overrides}}")
    parsed = [_condition(c, i, where) for i, c in enumerate(conditions)]
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        raise SuiteError(f"{where}: two conditions share a name ({sorted({n for n in names if names.count(n) > 1})})")
    return Suite(name, episodes, seed, tuple(parsed), str(path))


def _condition(entry, index: int, where: str) -> Condition:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise SuiteError(f"{where}: condition {index + 1} must be a mapping with a name, got {entry!r}")
    name = entry["name"]
    if not re.fullmatch(r"[\w.-]+", name):
        raise SuiteError(f"{where}: condition name {name!r}: letters, digits, '_', '.' or '-' only (a file name)")
    unknown = set(entry) - {"name", "overrides", "setup"}
    if unknown:
        raise SuiteError(f"{where}: condition '{name}': unknown keys {sorted(unknown)} (known: overrides, setup)")
    overrides = entry.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise SuiteError(f"{where}: condition '{name}': overrides must be a list of 'key=value' strings")
    bad = [o for o in overrides if o.split("=", 1)[0].startswith("eval.")]
    if bad:
        raise SuiteError(f"{where}: condition '{name}': {bad[0]}: a condition changes the task, not the evaluation")
    return Condition(name, tuple(overrides), entry.get("setup"))


def nominal_suite(episodes: int, seed: int) -> Suite:
    """The one-condition suite of a plain evaluation that needs the suite runner (eval.score=human)."""
    return Suite("nominal", episodes, seed, (Condition("nominal"),), "eval.episodes/eval.seed")


# --- episodes -----------------------------------------------------------------------------------------------------
def failure_mode(success: bool, ended_by: str, grasped_ever: bool | None, grasped_at_end: bool | None) -> str | None:
    """Why an episode failed (None: it did not). Grasp modes need the env's `info["grasped"]`; an env that does
    not report it falls back on what ended the episode."""
    if success:
        return None
    if ended_by in SAFETY_ENDINGS:
        return "safety_stop"
    if grasped_ever is not None:
        if not grasped_ever:
            return "never_grasped"
        if not grasped_at_end:
            return "dropped"
    return "timed_out" if ended_by == "time_limit" else "other"


def needs_hand_reset(env) -> bool:
    """A real robot: an env (or wrapper chain) with an arm `driver` that is not a MuJoCo twin."""
    return getattr(env, "driver", None) is not None and getattr(env, "driver_twin", None) is None


def run_episode(
    env, policy, seed: int, index: int, score: str = "env", prompt: HumanPrompt | None = None, film: bool = False
) -> tuple[dict, list[np.ndarray]]:
    """One deterministic episode: its result (success as `score` says, failure mode, wall times) and, with `film`,
    a frame before every action and one after the last step."""
    from robo_rl.eval.video import render_frame
    from robo_rl.policy_io import policy_action

    getattr(policy, "reset", lambda: None)()  # a policy with per-episode state (a base's chunk queue)
    frames: list[np.ndarray] = []
    start = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    steps_start = time.perf_counter()
    length, ret, interventions = 0, 0.0, 0
    grasped_ever = grasped = None
    while True:
        if getattr(env, "paused", False):  # a person paused the robot (a device's pause): wait, reading devices
            env.poll()
            if getattr(env, "estopped", None):
                break
            time.sleep(PROMPT_POLL_S)
            continue
        if film:
            frames.append(render_frame(env))
        obs, reward, terminated, truncated, info = env.step(policy_action(policy, obs, True))
        length, ret = length + 1, ret + float(reward)
        if prompt is not None and prompt.gui is not None:
            prompt.gui.step(obs, reward)
        interventions += bool(info.get("intervention"))
        if info.get("grasped") is not None:
            grasped = bool(info["grasped"])
            grasped_ever = bool(grasped_ever) or grasped
        if terminated or truncated:
            break
    end = time.perf_counter()
    if film:
        frames.append(render_frame(env))
    ended_by = (info.get("ended_by") or ("env" if terminated else "time_limit")) if length else "estop"
    if score != "human":  # the env's own check; a person's label (a device on a real robot) does not score here
        success = bool(length and info.get("success", False) and ended_by not in HUMAN_LABELS)
    elif ended_by in HUMAN_LABELS:
        success = HUMAN_LABELS[ended_by]
    elif ended_by in SAFETY_ENDINGS:
        success = False
    else:  # ended by the env's own check or the time limit: the person says how it went
        success = (prompt or HumanPrompt()).ask_label(
            f"episode {index + 1} (seed {seed}) ended by {ended_by}: a success? press success / failure, or type y / n "
            "and Enter"
        )
    if prompt is not None and prompt.gui is not None:
        prompt.gui.episode_end(bool(success), ended_by)
    result = {
        "episode": index,
        "seed": seed,
        "success": bool(success),
        "length": length,
        "return": ret,
        "ended_by": ended_by,
        "failure_mode": failure_mode(success, ended_by, grasped_ever, grasped),
        "interventions": interventions,
        "episode_s": end - start,
        "step_ms": (end - steps_start) / max(1, length) * 1e3,
    }
    return result, frames


def run_condition(
    env,
    policy,
    seeds: list[int],
    score: str = "env",
    prompt: HumanPrompt | None = None,
    condition: Condition | None = None,
    on_episode=None,
) -> list[dict]:
    """Every seed once, in order; on a real robot a person resets the scene by hand before each episode."""
    hand = needs_hand_reset(env)
    if (hand or score == "human") and prompt is None:
        prompt = HumanPrompt(human_devices(env))
    if hand and condition is not None and condition.setup:
        prompt.wait_for_reset(f"condition '{condition.name}': {condition.setup}; press success (or Enter) when set")
    results = []
    for i, seed in enumerate(seeds):
        if hand:
            name = f" ({condition.name})" if condition is not None else ""
            prompt.wait_for_reset(
                f"episode {i + 1}/{len(seeds)}{name}: reset the scene by hand, then press success (or Enter)"
            )
        result, _ = run_episode(env, policy, seed, i, score, prompt)
        results.append(result)
        if on_episode is not None:
            on_episode(result)
        if getattr(env, "estopped", None):
            raise EvaluationStopped(f"e-stop from {env.estopped}")
    return results


class EvaluationStopped(Exception):
    """A person or the safety layer ended the evaluation early; the episodes so far are reported."""


def human_devices(env) -> list:
    """The started teleop devices of the env's human wrapper (none when it has none)."""
    while env is not None:
        if isinstance(getattr(env, "devices", None), list):
            return env.devices
        env = getattr(env, "env", None)
    return []


class HumanPrompt:
    """A person's answer: a teleop device's success / failure button, or a line typed on stdin (read on a thread,
    so the devices are polled meanwhile; nothing blocks on `input()`)."""

    def __init__(self, devices=(), lines=None, say=print, poll_s: float = PROMPT_POLL_S) -> None:
        self.devices, self.say, self.poll_s = list(devices), say, poll_s
        self.gui = None  # the intervention page (robo_rl/gui/eval_view.py): it shows the prompt while we wait
        self._lines: queue.Queue = queue.Queue()
        source = lines if lines is not None else sys.stdin
        self._open = source is not None and not getattr(source, "closed", False)
        if self._open:
            threading.Thread(target=self._read, args=(source,), name="eval-prompt", daemon=True).start()

    def _read(self, source) -> None:
        try:
            for line in source:
                self._lines.put(line.strip().lower())
        except (OSError, ValueError):  # stdin closed under us
            pass
        self._lines.put(None)

    def _answer(self, events: tuple[str, ...], words: dict[str, str], text: str = "") -> str:
        while True:
            if self.gui is not None:
                self.gui.waiting(text)
            for device in self.devices:
                seen = device.read().events
                hit = next((e for e in events if e in seen), None)
                if hit is not None:
                    return hit
            if not self._open and not self.devices:
                raise PromptError(
                    "a person's answer is needed, but stdin is closed and no teleop device is "
                    "configured: run in a terminal, or give human=<device>"
                )
            try:
                line = self._lines.get(timeout=self.poll_s) if self._open else time.sleep(self.poll_s)
            except queue.Empty:
                continue
            if line is None:
                self._open = False
            elif line in words:
                return words[line]
            elif self._open:
                self.say(f"  answer with {' / '.join(repr(w) if w else 'Enter' for w in words)}")

    def wait_for_reset(self, text: str) -> None:
        self.say(text)
        self._answer(("success",), {"": "success"}, text)

    def ask_label(self, text: str) -> bool:
        self.say(text)
        answer = self._answer(
            ("success", "failure"), {"y": "success", "s": "success", "n": "failure", "f": "failure"}, text
        )
        return answer == "success"


# --- running a suite ----------------------------------------------------------------------------------------------
def build_env(cfg, score: str = "env"):
    """The task's env behind its safety layer (as trained), with the person's devices when they score it or a real
    robot needs them (hand resets, pause, e-stop, acknowledging a safety stop)."""
    from omegaconf import OmegaConf

    from robo_rl.envs.wrappers import make_guarded_env, wrap

    env = make_guarded_env(cfg)
    node = OmegaConf.select(cfg, "human", default=None)
    if (score == "human" or is_real_robot_config(cfg)) and node and "_target_" in node:
        env = wrap(env, node, "the human's devices")
    if (score == "human" or is_real_robot_config(cfg)) and OmegaConf.select(cfg, "gui.enabled", default=False):
        from robo_rl.gui.eval_view import EvalView

        view = EvalView(cfg, env)  # the page's web device joins the person's devices; its Success answers prompts
        env = view.env
        env.eval_view = view
    return env


def load_policy(cfg, env, payload: dict):
    from robo_rl.config import make_policy
    from robo_rl.runs import CheckpointError

    policy = make_policy(cfg, env)
    try:
        policy.load_state_dict(payload["algo"]["policy"])
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoint {payload.get('path')} does not fit this policy/env config ({str(e)[:120]})"
        ) from None
    return policy.eval()


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
            run = SuiteRun(_run_in_workers(suite, cfgs, payload, workers, bar))
        else:
            run = _run_in_process(suite, cfgs, payload, score, bar, prompt)
    finally:
        bar.close()
    run.clips = [{} for _ in cfgs]
    if film and clip_dir is not None and not run.real_robot:
        shutil.rmtree(clip_dir, ignore_errors=True)  # an earlier run's clips would show other episodes
        for i, (cond, cfg) in enumerate(zip(suite.conditions, cfgs, strict=True)):
            run.clips[i] = film_condition(cfg, payload, cond, run.episodes[i], clip_dir)
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


def _run_in_workers(suite: Suite, cfgs: list, payload: dict, workers: int, bar) -> list[list[dict]]:
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
    return out  # type: ignore[return-value]


def _worker(tasks, results, checkpoint: str, torch_threads: int) -> None:
    """An env process: builds each task's condition (env + policy) once and runs its episodes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
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


def is_real_robot_config(cfg) -> bool:
    """A config whose env drives an arm (not its twin, not a dry run): people reset it, one process runs it."""
    from omegaconf import OmegaConf

    driver = OmegaConf.select(cfg, "env.driver", default=None)
    if not driver or "_target_" not in driver:
        return False
    return not (
        driver.get("twin")
        or OmegaConf.select(cfg, "env.dry_run", default=False)
        or OmegaConf.select(cfg, "hardware.dry_run", default=False)
    )


# --- clips --------------------------------------------------------------------------------------------------------
def film_condition(cfg, payload: dict, cond: Condition, episodes: list[dict], clip_dir: Path) -> dict:
    """One success and one failure of the condition, replayed from their seeds (policy and env are deterministic)
    and written as small GIFs; {} when the env cannot render (the report says so)."""
    from robo_rl.eval.video import VideoError

    picks = {
        outcome: next((r for r in episodes if r["success"] == (outcome == "success")), None)
        for outcome in ("success", "failure")
    }
    if not any(picks.values()):
        return {}
    env = build_env(cfg)
    clips = {}
    try:
        policy = load_policy(cfg, env, payload)
        fps = float(getattr(env, "control_hz", 10.0))
        for outcome, episode in picks.items():
            if episode is None:
                continue
            result, frames = run_episode(env, policy, episode["seed"], episode["episode"], film=True)
            path = write_gif(Path(clip_dir) / f"{cond.name}_{outcome}.gif", frames, fps)
            clips[outcome] = {
                "path": f"{Path(clip_dir).name}/{path.name}",
                "episode": episode["episode"],
                "seed": episode["seed"],
                "replayed_as_evaluated": result["success"] == episode["success"],
            }
    except VideoError as e:
        clips = {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - a clip that cannot be made must not lose the evaluation
        clips = {"error": f"no clip: {type(e).__name__}: {e}"}
    finally:
        env.close()
    return clips


def write_gif(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    """At most CLIP_MAX_FRAMES frames (evenly picked, playing in the episode's real time), CLIP_SIZE_PX at most."""
    from PIL import Image

    picked = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), CLIP_MAX_FRAMES)).round().astype(int))
    height, width = frames[0].shape[:2]
    scale = min(1.0, CLIP_SIZE_PX / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    images = [Image.fromarray(np.ascontiguousarray(frames[i])).resize(size, Image.BILINEAR) for i in picked]
    frame_ms = max(20, round(1000.0 * len(frames) / fps / len(images)))  # GIF players floor shorter delays
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=frame_ms, loop=0)
    tmp.replace(path)
    return path


# --- statistics ---------------------------------------------------------------------------------------------------


def summarize(cond: Condition, episodes: list[dict], clips: dict | None = None) -> dict:
    """A condition's line of the report: success with its Wilson 95% interval, lengths, wall times, failure modes."""
    from robo_rl.eval.episodes import wilson_interval

    n, k = len(episodes), sum(r["success"] for r in episodes)
    low, high = wilson_interval(k, n)
    mean = lambda key: float(np.mean([r[key] for r in episodes])) if episodes else float("nan")  # noqa: E731
    modes = {
        **dict.fromkeys(FAILURE_MODES, 0),
        **collections.Counter(r["failure_mode"] for r in episodes if r["failure_mode"] is not None),
    }
    ended = dict(collections.Counter(r["ended_by"] for r in episodes))
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
        "ended_by": ended,
        "intervention_steps": sum(r["interventions"] for r in episodes),
        "seeds": [r["seed"] for r in episodes],
        "clips": clips or {},
        "episodes": episodes,
    }


# --- reports ------------------------------------------------------------------------------------------------------


# --- comparisons --------------------------------------------------------------------------------------------------


# --- the commands -------------------------------------------------------------------------------------------------
@dataclass
class EvalRequest:
    checkpoint: str
    suite: str | None
    workers: int | None  # None: the config's
    score: str | None
    video: bool | None
    episodes: int | None
    seed: int | None
    rest: list[str]  # the other overrides, applied to every condition


def parse_request(overrides: list[str]) -> EvalRequest:
    """The suite runner's own settings out of the command line, each checked; the rest are config overrides. Read
    here rather than from the run's config: a run folder saved before a setting existed does not have it."""
    import yaml

    from robo_rl.settings import SETTINGS, problem

    given: dict[str, object] = {}
    rest = []
    for o in overrides:
        key, _, value = o.partition("=")
        key = "eval.suite" if key == "suite" else key
        if key in (*EVAL_KEYS, "checkpoint"):
            given[key] = value if key in ("checkpoint", "eval.suite") else yaml.safe_load(value)
        else:
            rest.append(o)
    if given.get("eval.score") == "reward":
        raise SuiteError(REWARD_REFUSAL)
    for key, value in given.items():
        if key in SETTINGS and (text := problem(key, value)):
            raise ConfigError(f"{key}={value} is not allowed: {text} ({SETTINGS[key].meaning})")
    if not given.get("checkpoint"):
        raise SuiteError("eval with a suite needs checkpoint=<file.pt or run folder>")
    suite = given.get("eval.suite")
    return EvalRequest(
        str(given["checkpoint"]),
        None if suite in (None, "", "null") else str(suite),
        given.get("eval.workers"),
        given.get("eval.score"),
        given.get("eval.video"),
        given.get("eval.episodes"),
        given.get("eval.seed"),
        rest,
    )  # type: ignore[arg-type]


def wants_suite_runner(overrides: list[str]) -> bool:
    """`robo-rl eval` goes to the suite runner with a suite, or with a person scoring (a one-condition suite)."""
    from robo_rl.config import override_value

    suite = override_value(overrides, "suite") or override_value(overrides, "eval.suite")
    score = override_value(overrides, "eval.score")
    if score == "reward":
        raise SuiteError(REWARD_REFUSAL)
    return suite not in (None, "", "null") or score == "human"


def evaluate_on_suite(overrides: list[str], reuse: bool = False, say=print) -> tuple[dict, Path]:
    """Evaluate a checkpoint (`checkpoint=`) on a suite; with `reuse`, an existing report of the same checkpoint,
    suite, seeds, scoring and overrides is returned instead. Returns (report, its folder)."""
    from omegaconf import OmegaConf

    from robo_rl.config import load_config, load_saved_config

    req = parse_request(overrides)

    def configs(run_dir: Path | None) -> tuple:
        saved = run_dir is not None and (run_dir / "config.yaml").exists()

        def one(extra: list[str]):
            if saved:
                return load_saved_config(run_dir / "config.yaml", [*req.rest, *extra])
            return load_config([*req.rest, *_under_null_nodes(base, extra)] if extra else req.rest)

        base = one([])  # the user's own overrides: a problem there is theirs, not a condition's
        given_randomize = any(o.lstrip("+~").startswith("env.randomize") for o in req.rest)
        if req.suite is not None:
            suite = load_suite(req.suite)
        else:
            suite = nominal_suite(int(base.eval.episodes), int(base.eval.seed))
        suite = Suite(
            suite.name,
            req.episodes or suite.episodes,
            suite.seed if req.seed is None else req.seed,
            suite.conditions,
            suite.source,
        )
        cfgs = []
        for cond in suite.conditions:
            extra = list(cond.overrides) if given_randomize else _perturbation(base, list(cond.overrides))
            try:
                cfgs.append(one(extra))
            except ConfigError as e:
                raise SuiteError(f"suite {suite.name}, condition '{cond.name}': {e}") from None
        return base, suite, cfgs

    given = Path(req.checkpoint)
    guessed = given if given.is_dir() else given.parent.parent if given.parent.name == "checkpoints" else None
    base, suite, cfgs = configs(guessed)  # config errors answer before torch and the simulators are imported
    from robo_rl.runs import load_newest_readable

    payload, skipped = load_newest_readable(req.checkpoint)
    for problem in skipped:
        say(f"warning: {problem}: skipped, evaluating the checkpoint before it")
    path = Path(payload["path"])
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    if run_dir != guessed:
        base, suite, cfgs = configs(run_dir)
    score = req.score or OmegaConf.select(base, "eval.score", default="env")
    workers = req.workers or int(OmegaConf.select(base, "eval.workers", default=1))
    real = any(is_real_robot_config(c) for c in cfgs)
    if real or score == "human":
        workers = 1
    folder = suite.name + ("_real" if real else "")
    out_dir = (run_dir if run_dir is not None else path.parent) / "eval" / folder
    outcome_overrides = [o for o in req.rest if not o.lstrip("+~").startswith(NOT_OUTCOME_KEYS)]
    key = {
        "signature": suite.signature(),
        "checkpoint": str(path.resolve()),
        "score": score,
        "overrides": outcome_overrides,
    }
    if reuse and (out_dir / "report.json").exists():
        old = json.loads((out_dir / "report.json").read_text())
        if {k: old.get(k) for k in key} == key and not old.get("stopped"):
            say(f"reusing {out_dir / 'report.json'} (same checkpoint, suite, seeds, scoring and overrides)")
            return old, out_dir
    import torch

    torch.set_num_threads(base.torch_threads)
    film = req.video is not False  # clips unless eval.video=false: a suite's report shows what failing looks like
    run = run_suite(suite, cfgs, payload, workers, score, film, out_dir / "clips", bool(base.logger.progress))
    report = {
        **key,
        "suite": suite.name,
        "suite_file": suite.source,
        "episodes": suite.episodes,
        "seed": suite.seed,
        "env_steps": int(payload.get("counters", {}).get("env_steps", 0)),
        "real_robot": run.real_robot,
        "workers": workers,
        "stopped": run.stopped,
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "report_dir": str(out_dir.resolve()),
        "conditions": [
            summarize(c, e, clips) for c, e, clips in zip(suite.conditions, run.episodes, run.clips, strict=True)
        ],
    }
    write_suite_report(out_dir, report)
    return report, out_dir


def _perturbation(cfg, overrides: list[str]) -> list[str]:
    """A condition's `env.randomize.<key>` overrides as one node that replaces the run's own: the randomisation a
    policy was trained with is not the condition's (nominal is nominal for every policy compared)."""
    import yaml
    from omegaconf import OmegaConf

    if OmegaConf.select(cfg, "env.randomize", default="absent") == "absent":
        return overrides  # an env without randomisation
    draws, rest = {}, []
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key == "env.randomize":
            return overrides  # the condition gives the whole node itself
        if key.startswith("env.randomize."):
            draws[key.removeprefix("env.randomize.")] = yaml.safe_load(value)
        else:
            rest.append(o)
    node = "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in draws.items()) + "}" if draws else "null"
    return [*rest, f"env.randomize={node}"]


def _under_null_nodes(cfg, overrides: list[str]) -> list[str]:
    """Hydra adds a key under a node that is null by default (`env.randomize: null`) only when told to (`++`); a
    saved config takes it as it is."""
    from omegaconf import OmegaConf

    out = []
    for o in overrides:
        key = o.split("=", 1)[0]
        parent = key.rpartition(".")[0]
        null_parent = parent and OmegaConf.select(cfg, parent, default="absent") is None
        out.append(f"++{o}" if null_parent and not key.startswith(("+", "~")) else o)
    return out


def cmd_eval_suite(overrides: list[str]) -> int:
    report, out_dir = evaluate_on_suite(overrides, say=lambda text: print(text, file=sys.stderr))
    print(f"suite {report['suite']}: " + header_lines(report)[1])
    width = max(len(c["name"]) for c in report["conditions"])
    for c in report["conditions"]:
        fails = ", ".join(f"{m.replace('_', ' ')} {n}" for m, n in c["failure_modes"].items() if n)
        print(
            f"  {c['name']:<{width}}  {c['successes']:>3}/{c['n']:<3} {c['success_rate']:.2f} {ci_text(c)}  "
            f"length {c['mean_length']:.1f}  {c['episode_s']:.3g} s/episode  {fails}"
        )
    if report["stopped"]:
        print(f"stopped early: {report['stopped']}")
    print(f"report: {out_dir / 'report.md'} (and report.html, report.json)")
    return 0 if not report["stopped"] else 1


def _read_report(arg: str) -> dict | None:
    """A report.json given as itself or by its folder (None: not a report, a run or checkpoint to evaluate)."""
    path = Path(arg)
    if path.is_dir() and (path / "report.json").exists() and not (path / "checkpoints").is_dir():
        path = path / "report.json"
    if path.is_file() and path.suffix == ".json":
        try:
            report = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise SuiteError(f"{path}: not a suite report ({e})") from None
        if not isinstance(report, dict) or "conditions" not in report or "suite" not in report:
            raise SuiteError(f"{path}: not a suite report (robo-rl eval checkpoint=... suite=... writes one)")
        report.setdefault("report_dir", str(path.parent))
        return report
    return None


def _labels(args: list[str]) -> list[str]:
    """A short name per source: the run folder's (a report at <run>/eval/<suite>/report.json too)."""
    labels = []
    for arg in args:
        p = Path(arg)
        if p.is_dir() and (p / "report.json").exists() and not (p / "checkpoints").is_dir():
            p = p / "report.json"
        if p.suffix == ".json":
            name = p.parents[2].name if p.parent.parent.name == "eval" else p.parent.name
        elif p.suffix == ".pt":
            name = p.parents[1].name if p.parent.name == "checkpoints" else p.stem
        else:
            name = p.name
        label, k = name or arg, 2
        while label in labels:
            label, k = f"{name}_{k}", k + 1
        labels.append(label)
    return labels


def cmd_eval_compare(kind: str, args: list[str]) -> int:
    """`compare <a> <b> ...`: side by side on one suite; `sim_vs_real <run>` or `<sim report> <real report>`."""
    positional = [a for a in args if "=" not in a]
    options = [a for a in args if "=" in a]
    out = next((o.split("=", 1)[1] for o in options if o.startswith("out=")), None)
    options = [o for o in options if not o.startswith("out=")]
    suite_arg = next((o.split("=", 1)[1] for o in options if o.split("=", 1)[0] in ("suite", "eval.suite")), None)
    if kind == "sim_vs_real":
        positional, labels, out = _sim_vs_real_sources(positional, suite_arg, out)
    elif len(positional) < 2:
        raise SuiteError(
            "usage: robo-rl eval compare <run or report> <run or report> ... [suite=<name>] [out=<folder>]"
        )
    else:
        labels = _labels(positional)
    entries = []
    for label, arg in zip(labels, positional, strict=True):
        report = _read_report(arg)
        if report is None:
            if suite_arg is None:
                raise SuiteError(
                    f"compare: {arg} is a run, not a report: give suite=<name> to evaluate it "
                    f"(the suites: {', '.join(suite_names())})"
                )
            print(f"{label}: evaluating {arg} on suite {suite_arg}", file=sys.stderr)
            report, _ = evaluate_on_suite(
                [f"checkpoint={arg}", *options], reuse=True, say=lambda text: print(text, file=sys.stderr)
            )
        entries.append((label, report))
    suites = {r["suite"] for _, r in entries}
    if len(suites) > 1:
        raise SuiteError(f"compare: the reports are of different suites ({', '.join(sorted(suites))})")
    comparison = compare_reports(entries)
    title = "Sim vs real" if kind == "sim_vs_real" else "Comparison"
    stem = f"{kind if kind == 'sim_vs_real' else 'compare'}_{comparison['suite']}"
    md = write_comparison(Path(out) if out else Path("eval"), stem, comparison, title)
    print(compare_markdown(comparison, title), end="")
    print(f"\nwritten: {md} and {md.with_suffix('.json')}")
    return 0


def _sim_vs_real_sources(positional: list[str], suite: str | None, out: str | None):
    """(sources, labels, out folder): a run folder's <suite>/ and <suite>_real/ reports, or two reports given."""
    if len(positional) == 2:
        return positional, ["sim", "real"], out
    if len(positional) != 1:
        raise SuiteError(
            "usage: robo-rl eval sim_vs_real <run> [suite=<name>] | sim_vs_real <sim report> "
            "<real report> [out=<folder>]"
        )
    eval_dir = Path(positional[0]) / "eval"
    pairs = sorted(
        p.name[: -len("_real")]
        for p in eval_dir.glob("*_real")
        if (p / "report.json").exists() and (eval_dir / p.name[: -len("_real")] / "report.json").exists()
    )
    if suite is None and len(pairs) == 1:
        suite = pairs[0]
    if suite is None or suite not in pairs:
        raise SuiteError(
            f"sim_vs_real: {eval_dir} needs <suite>/report.json (sim) and <suite>_real/report.json "
            f"(a real robot's) for the same suite; found pairs: {', '.join(pairs) or 'none'}"
            + ("" if suite is None else f" (asked: {suite})")
        )
    sources = [str(eval_dir / suite / "report.json"), str(eval_dir / f"{suite}_real" / "report.json")]
    return sources, ["sim", "real"], out or str(eval_dir)
