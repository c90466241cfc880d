"""Evaluation: deterministic episodes on a fixed seed set, judged by the simulator's ground truth."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from robo_rl.algos.guards import guards_markdown, run_guards
from robo_rl.data.demos import rollout_episode
from robo_rl.data.tasks import TaskTable
from robo_rl.eval.behaviour import farmed_reward_check, farmed_warning
from robo_rl.eval.conditions import HUMAN_LABELS, Condition, is_real_robot_config
from robo_rl.eval.curves import plot_learning_curve
from robo_rl.eval.failures import SAFETY_ENDINGS, classify, task_key
from robo_rl.eval.per_task import per_instruction, per_instruction_markdown
from robo_rl.eval.prompt import PROMPT_POLL_S, EvaluationStopped, HumanPrompt, human_devices
from robo_rl.eval.throughput import throughput, throughput_markdown
from robo_rl.eval.video import render_frame, write_mp4
from robo_rl.eval.watch import watch_learned_reward, watched
from robo_rl.eval.wilson import wilson_interval
from robo_rl.policy_io import policy_action
from robo_rl.runs import read_metrics


def evaluate_policy(
    env,
    policy,
    episodes: int,
    seed: int,
    progress: bool = False,
    video_dir: Path | None = None,
    video_episodes: int = 0,
) -> dict:
    """Success rate (with a Wilson 95% interval) and episode lengths over seeds seed..seed+episodes-1.

    With `video_dir`, the first `video_episodes` episodes are filmed (an MP4 each, one frame per step plus the
    reset frame), and the first success and first failure among the rest too when the filmed ones lack one:
    those are replayed from their seed (policy and env are deterministic) rather than filming every episode."""
    act = lambda o: policy_action(policy, o, True)  # noqa: E731
    new_episode = getattr(policy, "reset", lambda: None)  # a policy with per-episode state (a base's chunk queue)
    results, videos = [], []
    for i in tqdm(range(episodes), desc="evaluation", unit="ep", disable=not progress):
        filmed = video_dir is not None and i < video_episodes
        new_episode()
        result, frames = _run_episode(env, act, seed + i, i, film=filmed)
        results.append(result)
        if filmed:
            videos.append(_save_video(env, video_dir, result, frames))
    if video_dir is not None:
        for outcome in (True, False):  # one success and one failure kept, where there is one
            if any(v["success"] == outcome for v in videos):
                continue
            i = next((j for j, r in enumerate(results) if r["success"] == outcome), None)
            if i is not None:
                new_episode()
                result, frames = _run_episode(env, act, seed + i, i, film=True)
                videos.append(_save_video(env, video_dir, {**result, "replayed": True}, frames))
    k = sum(r["success"] for r in results)
    low, high = wilson_interval(k, episodes)
    out = {
        "episodes": episodes,
        "seed": seed,
        "successes": k,
        "success_rate": k / episodes,
        "success_ci95": [low, high],
        "mean_length": float(np.mean([r["length"] for r in results])),
        "mean_return": float(np.mean([r["return"] for r in results])),
        "throughput": throughput(results, needs_hand_reset(env)),
        "farmed_reward": farmed_reward_check(results),
        "per_episode": results,
    }
    if (by_instruction := per_instruction(results)) is not None:
        out["per_instruction"] = by_instruction
    if farmed_warning(out["farmed_reward"], "evaluation"):
        print(farmed_warning(out["farmed_reward"], "evaluation"), file=sys.stderr)
    if video_dir is not None:
        out["videos"] = sorted(videos, key=lambda v: v["episode"])
    return out


def _run_episode(env, act, seed: int, index: int, film: bool) -> tuple[dict, list[np.ndarray]]:
    """One deterministic episode; with `film`, a frame before every action and one after the last step."""
    frames: list[np.ndarray] = []
    first_action_at: list[float] = []  # the reset ends where the first action is asked for
    given_act = act

    def act(obs):
        if not first_action_at:
            first_action_at.append(time.time())
        if film:
            frames.append(render_frame(env))
        return given_act(obs)

    started_at = time.time()
    tasks = TaskTable()
    records, success = rollout_episode(env, act, seed, index, tasks=tasks)
    ended_at = time.time()
    if film:
        frames.append(render_frame(env))
    result = {
        "episode": index,
        "seed": seed,
        "success": success,
        "length": len(records) - 1,
        "return": float(sum(r["reward"] for r in records[1:])),
        "started_at": started_at,
        "ended_at": ended_at,
        "reset_s": (first_action_at or [ended_at])[0] - started_at,
        "control_hz": control_hz(env),
        "interventions": int(sum(bool(r.get("intervention")) for r in records[1:])),
        "ended_by": records[-1].get("ended_by") if len(records) > 1 else None,
        "instruction": tasks.name(records[0]["task"]),
    }
    result.update(learned_reward_seen(env))
    return result, frames


def learned_reward_seen(env) -> dict:
    """The episode's highest learned success probability and its threshold, where the run's learned reward watched."""
    watch = watched(env)
    if watch is None or watch.episode_prob_max is None:
        return {}
    return {"success_prob_max": watch.episode_prob_max, "success_threshold": watch.success_threshold}


def control_hz(env) -> float | None:
    hz = getattr(getattr(env, "unwrapped", env), "control_hz", None)
    return float(hz) if hz else None


def _save_video(env, video_dir: Path, result: dict, frames: list[np.ndarray]) -> dict:
    name = f"episode_{result['episode']:03d}_seed{result['seed']}_{'success' if result['success'] else 'failure'}.mp4"
    fps = control_hz(env) or 10.0
    write_mp4(Path(video_dir) / name, frames, fps)
    return {**result, "path": f"{Path(video_dir).name}/{name}", "frames": len(frames)}


def write_report(out_dir: Path, result: dict, checkpoint: str, env_steps: int, metrics_path: Path | None) -> Path:
    """report.json, report.md (linking any videos) and learning_curve.png in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {**result, "checkpoint": checkpoint, "env_steps": env_steps}
    result["guards"] = run_guards(metrics_path)  # what the training run may not have measured (algos/guards.py)
    (out / "report.json").write_text(json.dumps(result, indent=2))
    low, high = result["success_ci95"]
    text = (
        f"# Evaluation\n\ncheckpoint: `{checkpoint}` (after {env_steps} env steps)\n\n"
        f"| episodes | success rate | Wilson 95% CI | mean length | mean return |\n|---|---|---|---|---|\n"
        f"| {result['episodes']} | {result['success_rate']:.2f} | [{low:.2f}, {high:.2f}] "
        f"| {result['mean_length']:.1f} | {result['mean_return']:.2f} |\n\n![learning curve](learning_curve.png)\n"
    )
    text += per_instruction_markdown(result.get("per_instruction"))
    if result.get("throughput"):
        text += "\n## Throughput and time\n\n" + throughput_markdown([("evaluation", result["throughput"])])
    if farmed := result.get("farmed_reward"):
        text += (
            f"\nlearned reward farmed (its success probability over {farmed['threshold']:.2f} while the env says "
            f"failure) in {farmed['farmed']}/{farmed['episodes']} episodes ({farmed['share']:.0%}; bound "
            f"{farmed['bound']:.0%}){' **FLAGGED**' if farmed['flagged'] else ''}\n"
        )
    if result.get("selection"):
        from robo_rl.eval.select import selection_markdown

        text += selection_markdown(result["selection"])
    if result.get("videos"):
        text += "\n## Videos\n\n| episode | seed | outcome | steps | video |\n|---|---|---|---|---|\n"
        for v in result["videos"]:
            outcome = "success" if v["success"] else "failure"
            link = f"[{Path(v['path']).name}]({v['path']})"
            text += f"| {v['episode']} | {v['seed']} | {outcome} | {v['length']} | {link} |\n"
    (out / "report.md").write_text(text + guards_markdown(result["guards"]))
    metrics = read_metrics(Path(metrics_path)) if metrics_path is not None else []
    plot_learning_curve(metrics, out / "learning_curve.png", result)
    return out / "report.md"


def needs_hand_reset(env) -> bool:
    """A real robot: an env (or wrapper chain) with an arm `driver` that is not a MuJoCo twin."""
    return getattr(env, "driver", None) is not None and getattr(env, "driver_twin", None) is None


def run_episode(
    env,
    policy,
    seed: int,
    index: int,
    score: str = "env",
    prompt: HumanPrompt | None = None,
    film: bool = False,
    hand_reset_s: float = 0.0,
) -> tuple[dict, list[np.ndarray]]:
    """One deterministic episode: its result (success as `score` says, failure mode, wall-clock timestamps, the
    signals its task's failure modes read) and, with `film`, a frame before every action and one after the last step.
    `hand_reset_s`: a person's reset just before it, counted in its reset time (robo_rl/eval/throughput.py)."""
    from robo_rl.eval.video import render_frame
    from robo_rl.policy_io import policy_action

    getattr(policy, "reset", lambda: None)()  # a policy with per-episode state (a base's chunk queue)
    frames: list[np.ndarray] = []
    started_at = time.time() - hand_reset_s
    start = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    cameras = sorted(obs.get("images") or {}) if isinstance(obs, dict) else []  # what the policy observes
    instruction = obs.get("instruction") if isinstance(obs, dict) else None  # the episode's, for per-task figures
    steps_start = time.perf_counter()
    reset_s = steps_start - start + hand_reset_s
    length, ret, interventions, takeovers, human = 0, 0.0, 0, 0, False
    grasped_ever = grasped = progress_max = progress = None
    faulted = False
    staged = getattr(getattr(env, "unwrapped", env), "progress", None)  # robosuite's staged progress (failures.py)
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
        takeovers += bool(info.get("intervention")) and not human  # a takeover starts where a human step follows one
        human = bool(info.get("intervention"))
        if info.get("grasped") is not None:
            grasped = bool(info["grasped"])
            grasped_ever = bool(grasped_ever) or grasped
        if info.get("progress") is not None or callable(staged):
            progress = float(info["progress"]) if info.get("progress") is not None else float(staged())
            progress_max = progress if progress_max is None else max(progress_max, progress)
        faulted = faulted or bool(info.get("fault"))
        if terminated or truncated:
            break
    end = time.perf_counter()
    ended_at = time.time()
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
        "task": task_key(env),
        "instruction": instruction,
        "grasped_ever": grasped_ever,
        "grasped_at_end": grasped,
        "progress_max": progress_max,
        "progress_end": progress,
        "faulted": faulted,
        "interventions": interventions,
        "takeovers": takeovers,
        "episode_s": end - start,
        "step_ms": (end - steps_start) / max(1, length) * 1e3,
        "started_at": started_at,
        "ended_at": ended_at,
        "reset_s": reset_s,
        "control_hz": control_hz(env),
        "real_robot": needs_hand_reset(env),  # its wall clock is the robot's time (robo_rl/eval/throughput.py)
        "cameras": cameras,
    }
    result.update(learned_reward_seen(env))
    result["failure_mode"] = classify(result)
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
        asked = time.time()
        if hand:
            name = f" ({condition.name})" if condition is not None else ""
            prompt.wait_for_reset(
                f"episode {i + 1}/{len(seeds)}{name}: reset the scene by hand, then press success (or Enter)"
            )
        result, _ = run_episode(env, policy, seed, i, score, prompt, hand_reset_s=time.time() - asked if hand else 0.0)
        results.append(result)
        if on_episode is not None:
            on_episode(result)
        if getattr(env, "estopped", None):
            raise EvaluationStopped(f"e-stop from {env.estopped}")
    return results


# --- running a suite ----------------------------------------------------------------------------------------------
def make_eval_env(cfg):
    """The task's env behind its safety layer (as trained), watched by the run's learned reward if it had one (it
    scores, it never judges: robo_rl/eval/watch.py)."""
    from robo_rl.envs.wrappers import make_guarded_env

    return watch_learned_reward(make_guarded_env(cfg), cfg)


def build_env(cfg, score: str = "env"):
    """The evaluation env (make_eval_env), with the person's devices when they score it or a real robot needs them
    (hand resets, pause, e-stop, acknowledging a safety stop)."""
    from omegaconf import OmegaConf

    from robo_rl.envs.wrappers import wrap

    env = make_eval_env(cfg)
    node = OmegaConf.select(cfg, "human", default=None)
    if (score == "human" or is_real_robot_config(cfg)) and node and "_target_" in node:
        env = wrap(env, node, "the human's devices")
    if (score == "human" or is_real_robot_config(cfg)) and cfg.gui.enabled:
        from robo_rl.gui.eval_view import EvalView

        view = EvalView(cfg, env)  # the page's web device joins the person's devices; its Success answers prompts
        env = view.env
        env.eval_view = view
    return env


def load_policy(cfg, env, payload: dict):
    from robo_rl.config import ConfigError, make_policy
    from robo_rl.runs import CheckpointError

    policy = make_policy(cfg, env)
    try:
        policy.load_state_dict(payload["algo"]["policy"])
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoint {payload.get('path')} does not fit this policy/env config ({str(e)[:120]})"
        ) from None
    chunking = cfg.actor.get("chunking", "sync")
    if chunking != "sync":  # evaluated as the actor would run it: each chunk takes over d steps after its observation
        from policies.acting import acting_policy

        try:
            acting_policy(policy).use_chunking(chunking, cfg.actor.inference_delay_steps, 1.0 / (control_hz(env) or 10))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return policy.eval()
