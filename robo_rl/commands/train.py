"""`robo-rl train` on one machine: demonstrations, a learner and an actor process under one progress bar, the
training run's evaluation report; a failed start removes the run folder it made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from robo_rl.commands.common import STARTED_BY_ENV, UsageError, own_session, run_dir_for, sigterm_as_interrupt
from robo_rl.commands.eval import cmd_eval
from robo_rl.seeding import ACTOR_SEED_STRIDE


def cmd_train(overrides: list[str]) -> int:
    """`robo-rl train`: demonstrations (and a BC base for a residual policy), a learner and an actor process,
    one progress bar, then the evaluation report."""
    from robo_rl.config import load_config

    cfg = load_config(overrides)  # first: a bad setting is refused before numpy and the replay are imported
    # `kill` (a service manager's stop, a cluster's preemption) stops the run like Ctrl-C: the learner and the actor
    # are stopped in turn and the learner writes its checkpoint; by default SIGTERM would end this process alone and
    # leave them running without it
    sigterm_as_interrupt()
    _check_reward_model(cfg)
    actor_tasks = _actor_tasks(cfg)  # before the run folder: a task the env cannot draw is refused in one line
    from robo_rl.runs import discard_unfinished_run, is_resumable

    fresh = not cfg.run_dir and not cfg.resume  # this command makes the run folder, so a failed start removes it
    run_dir = run_dir_for(cfg)
    print(f"run folder: {run_dir}")
    try:
        code = _train(cfg, overrides, run_dir, fresh, actor_tasks)
    except BaseException:
        if fresh and discard_unfinished_run(run_dir):
            print(f"removed the run folder {run_dir}: the run stopped before its first checkpoint")
        raise
    if code == 130 and is_resumable(run_dir):
        print(f"resume with: robo-rl train resume={run_dir}")
    elif code == 130 and fresh and discard_unfinished_run(run_dir):
        print(f"removed the run folder {run_dir}: the run stopped before its first checkpoint")
    return code


def _check_reward_model(cfg) -> None:
    """A learned reward's model folder must be there before demonstrations are recorded for it (a critic served
    over tcp:// is checked when the actor connects)."""
    from robo_rl.config import ConfigError

    reward = cfg.get("reward")
    model = reward.get("model") if reward and "_target_" in reward else None
    if isinstance(model, str) and "://" not in model and not Path(model).exists():
        raise ConfigError(
            f"reward.model={model}: no reward model there (robo-rl reward train kind=... data=<episodes> out={model} "
            "makes one; README 'Learned rewards')"
        )


def _actor_tasks(cfg) -> list[list[str]]:
    """Each actor's `actor.task=` override (none: as configured): train.actor_tasks=split gives actor i the env's task
    i mod the number of tasks. A task the env cannot draw, or a split over fewer than two, is refused (ActorTaskError)
    before anything starts; the bare env is built for its task names only when a task is asked for."""
    from robo_rl.envs.actor_task import check_actor_task, env_tasks, split_tasks

    actors, split = int(cfg.train.actors), cfg.train.actor_tasks == "split"
    if cfg.actor.task is None and not split:
        return [[] for _ in range(actors)]
    if split and cfg.actor.task is not None:
        raise UsageError(
            f"actor.task={cfg.actor.task} and train.actor_tasks=split each choose the actors' tasks: set one"
        )
    from robo_rl.config import make_env

    env = make_env(cfg)
    try:
        tasks = env_tasks(env)
    finally:
        env.close()
    check_actor_task(cfg.actor.task, tasks)
    # quoted for hydra: the value is always a string (task names hold dashes)
    return [[f"actor.task='{t}'"] for t in split_tasks(tasks, actors)] if split else [[] for _ in range(actors)]


def _train(cfg, overrides: list[str], run_dir: Path, fresh: bool, actor_tasks: list[list[str]]) -> int:
    """The demonstrations, the base, the processes and the report of `cmd_train`, in `run_dir`; `actor_tasks`: each
    actor's extra overrides (`_actor_tasks`)."""
    from robo_rl.data.demos import load_or_make_demos
    from robo_rl.progress import TrainingBar

    bar = TrainingBar(cfg, run_dir, enabled=cfg.logger.progress)  # shown from the start, with the total
    bar.phase("demonstrations")
    demos, demo_path, cached = load_or_make_demos(cfg, progress=cfg.logger.progress)
    if demos is None:
        bar.bar.write("demonstrations: none (demos.num_episodes=0): online data and interventions only")
    else:
        episodes = int((demos["step"] == 0).sum())
        bar.bar.write(f"demonstrations: {episodes} episodes {'from' if cached else 'recorded to'} {demo_path}")
    child_args = [*overrides, f"run_dir={run_dir}", "logger.progress=false"]
    spec = _ensure_env_spec(cfg, run_dir)
    _keep_task_vocabulary(cfg, run_dir, spec)
    if "base" in cfg.policy:  # a residual policy: its frozen base must exist and fit before any process starts
        child_args.append(f"policy.base.path={_ensure_base(cfg, run_dir, bar, spec)}")
    elif "path" in cfg.policy and cfg.policy.get("model"):  # a flow/diffusion policy to fine-tune: cloned first
        child_args.append(f"policy.path={_ensure_base(cfg, run_dir, bar, spec, key='path')}")
    child_env = {**os.environ, STARTED_BY_ENV: "train"}
    procs, restarts = {}, 0
    try:
        if cfg.gui.enabled:  # the page first: the actor's bridge finds it there (and would reconnect anyway)
            procs["gui"] = subprocess.Popen(
                [sys.executable, "-m", "robo_rl.cli", "gui", *child_args],
                stdout=_child_log(run_dir / "gui.log"),
                stderr=subprocess.STDOUT,
                env=child_env,
                **own_session(),  # its own scheduling group and session (common.own_session)
            )
            bar.bar.write(f"intervention GUI: http://{cfg.gui.host}:{cfg.gui.port}/ (log: {run_dir / 'gui.log'})")
        for role in ("learner", "actor"):
            bar.phase(f"starting the {role}")
            log = _child_log(run_dir / f"{role}.log")
            procs[role] = subprocess.Popen(
                [sys.executable, "-m", "robo_rl.cli", role, *child_args, *(actor_tasks[0] if role == "actor" else [])],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                **own_session(),  # its own scheduling group and session (common.own_session)
            )
            if role == "learner":
                try:
                    _wait_for_learner(procs["learner"], run_dir)
                except UsageError:
                    if fresh:
                        _stop(procs)
                        bar.finish(done=False)
                        _discard_run_dir(run_dir)
                    raise
                if cfg.resume:  # the learner's own count, which its log holds (the console shows only the bar)
                    bar.bar.write(_resumed_line(run_dir / "learner.log"))
        for i in range(1, int(cfg.train.actors)):  # more sim actors (on-policy rollouts fill faster), each seeded
            name = f"actor-{i}"
            procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "robo_rl.cli",
                    "actor",
                    *child_args,
                    f"actor.id={name}",
                    f"seed={int(cfg.seed) + ACTOR_SEED_STRIDE * i}",
                    *actor_tasks[i],
                ],
                stdout=_child_log(run_dir / f"{name}.log"),
                stderr=subprocess.STDOUT,
                env=child_env,
                **own_session(),  # its own scheduling group and session (common.own_session)
            )
        bar.phase("waiting for the actor")
        restarts = _follow_progress(cfg, run_dir, procs, bar, _learner_restarter(run_dir, child_args, child_env))
    except KeyboardInterrupt:
        bar.finish(done=False)
        print("\ninterrupted: stopping the learner and the actor (the learner writes a checkpoint) ...")
        _stop(procs)
        return 130
    finally:
        _stop(procs)
    if procs["learner"].returncode == 130 and procs["actor"].returncode == 130:
        # a Ctrl-C reached both children (our process group) and they stopped before this process saw its own
        print("\ninterrupted: the learner wrote a checkpoint on the way out")
        return 130
    if procs["learner"].returncode != 0:  # the learner's result decides; an actor failure is the likelier cause
        # an actor's 130 is this command stopping it after the learner died: the learner is the cause then
        role = "actor" if procs["actor"].returncode not in (0, None, 130) else "learner"
        code, last = procs[role].returncode, _last_log_line(run_dir / f"{role}.log", empty="(no output)")
        after = f" (after {restarts} restarts on the run folder)" if role == "learner" and restarts else ""
        raise UsageError(f"the {role} process exited with code {code}{after}: {last} (see {run_dir / role}.log)")
    return cmd_eval([f"checkpoint={run_dir}", *[o for o in overrides if o.startswith("eval.")]], training_report=True)


def _discard_run_dir(run_dir: Path) -> None:
    """Remove a run folder this command made whose learner never started: it holds no run, only clutter."""
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)


def _ensure_env_spec(cfg, run_dir: Path):
    """The run folder's env spec, which the learner reads instead of opening the env: the one there or given, else
    from the env's config when its class can tell (`spec_from_config`), else from the simulated env built here once."""
    from omegaconf import OmegaConf

    from robo_rl.config import make_env
    from robo_rl.envs.spec import SPEC_FILE, read_spec, spec_of, static_spec, write_spec
    from robo_rl.envs.wrappers import wrapper_extras

    if (run_dir / SPEC_FILE).exists() or cfg.env_spec:
        return read_spec(run_dir / SPEC_FILE if (run_dir / SPEC_FILE).exists() else Path(cfg.env_spec))
    extras = wrapper_extras(cfg)  # the actor's wrappers (a learned reward's scores, ...) add to each record
    spec = static_spec(OmegaConf.to_container(cfg.env, resolve=True), extras)
    if spec is None:  # the bare env, built here once, with what the actor's wrappers will add
        env = make_env(cfg)
        try:
            spec = spec_of(env, extras)
        finally:
            env.close()
    write_spec(spec, run_dir)
    return spec


def _keep_task_vocabulary(cfg, run_dir: Path, spec) -> None:
    """policy.encoder.task_conditioning=onehot: the env's instructions, in order, written into the run's config.yaml
    (policy.encoder.instructions), so the checkpoints keep the one-hot layout their weights were trained with."""
    from omegaconf import OmegaConf

    from robo_rl.config import save_config
    from robo_rl.task_conditioning import conditioned, env_instructions

    if conditioned(cfg.policy) and not cfg.policy.encoder.get("instructions"):
        OmegaConf.update(cfg, "policy.encoder.instructions", env_instructions(spec))
        save_config(cfg, run_dir / "config.yaml")


def _ensure_base(cfg, run_dir: Path, bar, spec, key: str = "base.path") -> str:
    """The policy's frozen base (`policy.base.path`), or the policy to fine-tune (`policy.path`): the one
    configured, or one behaviour-cloned here from the demonstrations (its path then goes into the run's
    config.yaml, so a resume finds it). Checked against the task's `spec` in one line."""
    from omegaconf import OmegaConf

    from robo_rl.config import make_policy, save_config

    if not OmegaConf.select(cfg.policy, key):
        from robo_rl.offline.bc import train_bc

        bar.phase("behaviour-cloning a base")
        summary = train_bc(cfg, run_dir, progress=cfg.logger.progress)
        OmegaConf.update(cfg.policy, key, summary["checkpoint"])
        bar.bar.write(f"base: {summary['checkpoint']} (success {summary.get('eval', {}).get('success_rate', '?')})")
        save_config(cfg, run_dir / "config.yaml")
    make_policy(cfg, spec)  # a missing base or one for another task: ConfigError, one line
    return str(OmegaConf.select(cfg.policy, key))


LEARNER_START_TIMEOUT_S = 600.0  # a loaded two-core machine starting several runs at once took over 60 s


def _wait_for_learner(proc: subprocess.Popen, run_dir: Path, timeout_s: float = LEARNER_START_TIMEOUT_S) -> None:
    """Wait until the learner writes its pid file (its sockets are bound by then) or dies. A fresh run's folder is
    discarded on failure, so the error carries the learner's last log line itself."""
    deadline = time.monotonic() + timeout_s
    pid_file = run_dir / "learner.pid"
    while not (pid_file.exists() and pid_file.read_text() == str(proc.pid)):
        if proc.poll() is not None:
            raise UsageError(f"the learner failed to start: {_last_log_line(run_dir / 'learner.log')}")
        if time.monotonic() > deadline:
            raise UsageError(
                f"the learner did not start within {timeout_s:.0f} s (its last log line: "
                f"{_last_log_line(run_dir / 'learner.log')})"
            )
        time.sleep(0.1)


def _child_log(path: Path, start: str = "started again"):
    """A child process's log, opened to append: a resumed run (or a restarted learner) keeps what its earlier
    processes wrote (the actor's log names every call for a person), after a line that marks where this `start`
    begins."""
    log = open(path, "a")
    if log.tell() > 0:
        log.write(f"\n--- train: {start} at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
        log.flush()
    return log


def _resumed_line(log: Path) -> str:
    """The learner's "resumed at N env steps ..." line from its log, without the logging prefix."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if "resumed at " in line]
    return lines[-1][lines[-1].index("resumed at ") :] if lines else "resumed (the learner's log does not say where)"


def _last_log_line(path: Path, empty: str = "no output") -> str:
    """A child process's last log line, the one that names why it stopped (`empty` when it wrote nothing)."""
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else empty


LEARNER_RESTARTS = 3  # a learner that crashes more often than this within the window ends the run: it would again
LEARNER_RESTART_WINDOW_S = 600.0


def _learner_restarter(run_dir: Path, child_args: list[str], child_env: dict):
    """A function that starts a learner again on the run folder after a crash (appending to its log): a resume
    when it stored anything (a checkpoint or replay), else a fresh learner (the actor resends all it holds)."""
    from robo_rl.config import config_groups

    given = [a for a in child_args if a.split("=", 1)[0] not in ("resume", "run_dir")]
    groups = set(config_groups())  # the saved config.yaml already resolves them, and a resume refuses them
    keys = [a for a in given if a.split("=", 1)[0].lstrip("+~") not in groups]

    def restart(code: int, n: int) -> subprocess.Popen:
        stored = any((run_dir / "checkpoints").glob("step_*.pt")) or any(run_dir.glob("replay/online/seg_*.rrs"))
        args = [f"resume={run_dir}", *keys] if stored else given
        log = _child_log(run_dir / "learner.log", f"restart {n} (exit {code})")
        cmd = [sys.executable, "-m", "robo_rl.cli", "learner", *args, f"run_dir={run_dir}"]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env, **own_session())

    return restart


def _follow_progress(cfg, run_dir: Path, procs: dict, bar, restart_learner) -> int:
    """Feed the training bar from the learner's metrics file until both processes have ended; a learner that
    crashes while the actor runs (which holds, keeping its data) is restarted on the run folder, at most
    LEARNER_RESTARTS times within LEARNER_RESTART_WINDOW_S. Returns how many restarts there were."""
    import json

    restarts: list[float] = []
    with open(run_dir / "metrics.jsonl") as f:
        f.seek(0, os.SEEK_END)  # a resumed run's earlier lines are history (the bar starts at its step count)
        extra = {k: p for k, p in procs.items() if k.startswith("actor-")}
        while procs["learner"].poll() is None or procs["actor"].poll() is None:
            for line in f.readlines():
                try:
                    m = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if m.get("kind") == "learner":
                    bar.learner_line(m)
            code = procs["learner"].poll()
            now = time.monotonic()
            recent = [t for t in restarts if now - t < LEARNER_RESTART_WINDOW_S]
            if code not in (None, 0, 130) and procs["actor"].poll() is None and len(recent) < LEARNER_RESTARTS:
                restarts.append(now)
                n = len(recent) + 1
                bar.bar.write(
                    f"the learner exited with code {code}: restarted on the run folder ({n} of {LEARNER_RESTARTS})"
                )
                procs["learner"] = restart_learner(code, len(restarts))
                continue
            if procs["learner"].poll() is not None and procs["actor"].poll() is None:
                try:  # a finished learner told the actor to stop (5 s to end by itself); any other, to hold
                    procs["actor"].wait(timeout=5.0 if code == 0 else 0.0)
                except subprocess.TimeoutExpired:
                    pass
                _stop({"actor": procs["actor"], **extra})
            if procs["actor"].poll() not in (None, 0) and procs["learner"].poll() is None:
                _stop({"learner": procs["learner"]})  # the actor died or was stopped: end the learner with a checkpoint
            _until_one_exits((procs["learner"], procs["actor"]), 0.5)
    _stop(extra)  # the other actors end with the run
    bar.finish(done=procs["learner"].returncode == 0)
    return len(restarts)


def _until_one_exits(procs, timeout_s: float, every_s: float = 0.05) -> None:
    """Sleep `timeout_s`, or less: until one of `procs` that is running now exits (a crashed learner is restarted,
    a finished run reported, within `every_s` of it rather than at the next half-second tick)."""
    running = [p for p in procs if p.poll() is None]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and all(p.poll() is None for p in running):
        time.sleep(every_s)


def _stop(procs: dict, timeout_s: float = 30.0) -> None:
    """SIGINT (the learner checkpoints on it), then SIGKILL whatever is still running after the timeout."""
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
