"""`robo-rl record <dst> mode=dagger policy=<checkpoint or run> [human=dagger_leader] [keep=corrections|all]`:
a policy acts and a person corrects it (HG-DAgger / RaC collection, robo_rl/teleop/dagger.py).

The policy (a checkpoint, or a run folder's newest) acts at the env's control rate; the person pauses it from any
device's buttons (a foot pedal's, the keyboard's p), the robot holds, a leader arm with motors is driven to the
robot's pose, the person takes over (space, or the pedal bound to `intervention_toggle`), corrects, and hands back.
`keep=corrections` writes only the corrected stretches, each as its own episode (imitation data: HG-DAgger trains on
these); `keep=all` writes whole episodes with every record's phase in `extra/dagger_phase` and the person's steps
flagged `intervention` (RL data). Labels steer the session as in `robo-rl record`: success / failure end an episode,
re-record discards it, abort ends the session, e-stop stops it. Each episode is on disk before the next starts. An
aborted episode is written too, unlike `robo-rl record`'s: a demonstration is all or nothing, but each corrected step
is the person's data from the moment it was given (under `keep=all` the record says the episode ended `human_abort`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from robo_rl.commands.common import paced_episode
from robo_rl.errors import UserError
from robo_rl.teleop.dagger import PHASE_CODES

KEEPS = ("corrections", "all")
CORRECTING = PHASE_CODES["correcting"]
SOURCE = "dagger"  # the store's label of this session's records


class DaggerUsageError(UserError, ValueError):
    pass


def correction_segments(phases: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of correcting steps, `phases[i]` being step i+1's phase."""
    segments, start = [], None
    for i, phase in enumerate([*phases, -1]):
        if phase == CORRECTING and start is None:
            start = i
        elif phase != CORRECTING and start is not None:
            segments.append((start, i))
            start = None
    return segments


def record_dagger_episodes(
    env,
    act: Callable[[dict], np.ndarray],
    reset_policy: Callable[[], None],
    store,
    episodes: int,
    keep: str = "corrections",
    seed: int = 0,
    realtime: bool = True,
    say=print,
) -> dict:
    """Run `env` (an InterventionWrapper with takeover=dagger) under `act` until `episodes` episodes are done or the
    person ends the session; `reset_policy()` empties a chunked policy's queue at each episode's start and on each
    hand-back. Returns the session's counts."""
    from robo_rl.data.schema import fields_for_env

    if keep not in KEEPS:
        raise DaggerUsageError(f"keep={keep}: corrections (only the corrected stretches) or all (whole episodes)")
    if getattr(env, "dagger", None) is None:
        raise DaggerUsageError("mode=dagger needs human.takeover=dagger (the pause, sync and correction phases)")
    fields = fields_for_env(env)
    period = 1.0 / float(getattr(env, "control_hz", 10.0))
    counts = {"episodes": 0, "corrections": 0, "corrected_steps": 0, "steps": 0, "written": 0, "rerecorded": 0}
    stop, attempts = None, 0
    try:
        while counts["episodes"] < episodes and stop is None:
            obs, _ = env.reset(seed=seed + attempts)
            attempts += 1
            reset_policy()
            steps = [(obs, None)]

            def after_step(obs, reward, terminated, truncated, info, steps=steps):  # this episode's
                if info.get("dagger_handback"):
                    reset_policy()  # its chunk was planned before the correction
                steps.append((obs, (reward, terminated, truncated, info)))

            # while paused the robot holds: the policy is not asked; a sync drives the leader
            info = paced_episode(env, obs, act, after_step, period, realtime)
            ended = info.get("ended_by")
            if env.estopped:
                stop = f"e-stop from {env.estopped}"
            elif ended == "human_abort":
                stop = "aborted by the person (terminate_episode)"
            if ended == "human_rerecord":
                counts["rerecorded"] += 1
                say(f"episode {attempts}: discarded, recording it again")
                continue
            counts["episodes"] += 1
            counts["steps"] += len(steps) - 1
            _write(store, fields, steps, keep, attempts, counts)
    except KeyboardInterrupt:
        stop = "interrupted (Ctrl-C)"
    counts["stopped"] = stop or "done"
    return counts


def _write(store, fields: dict, steps: list, keep: str, attempt: int, counts: dict) -> None:
    """The episode's kept part on disk: the whole of it, or each corrected stretch as an episode of its own."""
    from robo_rl.data.schema import EpisodeRecorder, extras_of, stack_records

    phases = [int(info.get("record_extras", {}).get("dagger_phase", 0)) for _, (_, _, _, info) in steps[1:]]
    segments = correction_segments(phases)
    counts["corrections"] += len(segments)
    counts["corrected_steps"] += sum(end - start for start, end in segments)
    spans = [(0, len(phases))] if keep == "all" else segments
    for n, (start, end) in enumerate(spans):
        recorder = EpisodeRecorder(len(steps[1][1][3]["action_executed"]), extras_of(fields))
        episode_id = attempt * 1000 + n  # a stretch is an episode of its own: ids unique in the session
        records = [recorder.reset(steps[start][0], episode_id, 0, time.time())]
        for i in range(start, end):
            obs, (reward, terminated, truncated, info) = steps[i + 1]
            if i == end - 1 and not (terminated or truncated):
                truncated = True  # a stretch cut at the hand-back: not a true end (bootstrapping goes on)
            records.append(recorder.record_step(obs, reward, terminated, truncated, info, 0, time.time()))
        if len(recorder.tasks) and len(recorder.tasks) != len(store.tasks):
            store.save_tasks(recorder.tasks.names)
        batch = stack_records(records, fields)
        store.write(batch, np.full(len(records), SOURCE, dtype=object))  # one label: an episode is not split by it
        counts["written"] += 1


def cmd_record_dagger(dst: str, overrides: list[str], options: dict) -> int:
    from omegaconf import OmegaConf

    from robo_rl.config import ConfigError, load_config, load_saved_config

    checkpoint = options.get("policy")
    if not checkpoint:
        raise DaggerUsageError(
            "mode=dagger needs policy=<checkpoint .pt or run folder>: the policy the person corrects"
        )
    keep = options.get("keep", "corrections")
    if keep not in KEEPS:
        raise DaggerUsageError(f"keep={keep}: corrections (only the corrected stretches) or all (whole episodes)")
    given = Path(checkpoint)
    if not given.exists():
        raise DaggerUsageError(f"policy={checkpoint} does not exist: pass a checkpoint .pt or a run folder")
    if Path(dst).exists() and any(Path(dst).iterdir()):
        raise DaggerUsageError(f"{dst} exists and is not empty: choose a new folder")
    human = [o for o in overrides if o.split("=", 1)[0] == "human" or o.startswith("human.")]
    rest = [o for o in overrides if o not in human]
    if not any(o.startswith("actor.realtime=") for o in rest):
        rest.append("actor.realtime=true")  # a person corrects at the robot's pace
    run_dir = given if given.is_dir() else given.parent.parent if given.parent.name == "checkpoints" else None
    saved = run_dir / "config.yaml" if run_dir is not None else None
    cfg = load_saved_config(saved, rest) if saved is not None and saved.exists() else load_config(rest)
    # the person's devices come from this command line, whatever the run trained with; their interpolations
    # (${env.expert}, ${seed}) resolve against the run's own config
    chosen = load_config([*(human if any(o.startswith("human=") for o in human) else ["human=dagger_leader", *human])])
    block = OmegaConf.to_container(chosen.human, resolve=False)
    if not block.get("devices"):
        raise ConfigError("robo-rl record mode=dagger needs devices: human=dagger_leader | keyboard | gamepad | ...")
    OmegaConf.set_struct(cfg, False)
    cfg.human = {**block, "takeover": "dagger"}
    OmegaConf.set_struct(cfg, True)
    return _run(cfg, dst, given, keep, int(options.get("episodes", cfg.demos.num_episodes)))


def _run(cfg, dst: str, checkpoint: Path, keep: str, episodes: int) -> int:
    from omegaconf import OmegaConf

    from policies.acting import acting_policy
    from robo_rl.data.schema import fields_for_env
    from robo_rl.data.storage import SegmentStore
    from robo_rl.envs.wrappers import make_actor_env
    from robo_rl.eval.episodes import load_policy
    from robo_rl.policy_io import policy_step
    from robo_rl.runs import load_newest_readable

    payload, _ = load_newest_readable(checkpoint)
    guards = [w for w in cfg.actor.wrappers if isinstance(w, str) and w == "safety"]  # a robot keeps its safety layer
    env = make_actor_env(OmegaConf.merge(cfg, {"actor": {"wrappers": [*guards, "human"]}}))
    try:
        policy = load_policy(cfg, env, payload)
        acting = acting_policy(policy)
        store = SegmentStore(Path(dst), fields_for_env(env), partition="demos" if keep == "corrections" else "online")
        print(
            f"correcting {Path(payload['path']).name} over {episodes} episodes with "
            f"{', '.join(d.name for d in env.devices)}; keep={keep} into {dst}",
            flush=True,
        )
        counts = record_dagger_episodes(
            env,
            lambda obs: policy_step(policy, obs, deterministic=True)[0],
            acting.reset,
            store,
            episodes,
            keep,
            int(cfg.demos.seed),
            bool(cfg.actor.realtime),
        )
    finally:
        env.close()
    print(
        f"{counts['episodes']} episodes, {counts['corrections']} corrections ({counts['corrected_steps']} of "
        f"{counts['steps']} steps); wrote {counts['written']} episodes; {counts['stopped']}"
    )
    return 0
