"""`robo-rl`: train (learner + actor processes), learner, actor, eval, show.

Usage: robo-rl <command> [key=value ...]   (hydra overrides of launch/conf/config.yaml)
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from robo_rl.errors import UserError

USAGE = """usage: robo-rl <command> [overrides ...]

commands:
  train     record demonstrations, start a learner and an actor process, train, evaluate
  launch    start a layout's processes (learner, N actors, GUI, critic; over SSH too) with one status line each
  learner   start the learner alone (binds transport.* ports on loopback)
  actor     start one actor alone (connects to the learner at transport.host)
  eval      evaluate a checkpoint: robo-rl eval checkpoint=<file.pt or run folder>
            suites: eval checkpoint=<run> suite=<name>; eval compare <run> <run> ... suite=<name>
  bc        behaviour-clone a base policy (an MLP, or policy=flow|diffusion) into <run>/bc/policy.pt, evaluate it
  distill   a K-step flow/diffusion policy (or a DSRL run) into a one-step flow: robo-rl distill checkpoint=<..>
  record    record demonstrations with a teleop device: robo-rl record <dst> [human=keyboard] [episodes=20]
  reward    robo-rl reward train|eval ...: a learned reward model from recorded episodes, and its quality
  critic    robo-rl critic serve model=<folder> [host=] [port=5600]: a reward model for actors elsewhere
  gui       the intervention page for running actors (http://127.0.0.1:8765/); train gui=true starts it too
  doctor    check a robot workstation (arm, cameras, rate, workspace, e-stop, watchdog): doctor env=so101 | twin=so101
  calibrate record an arm's workspace box and home pose by moving it: calibrate env=so101 [out=<file>]
  show      print the composed config
  keys      robo-rl keys generate <dir> [actor ids ...]: CURVE keys for links off loopback
  data      robo-rl data inspect|convert|record ...: episodes in run folders, replay stores, LeRobot
            datasets and robomimic files (robo-rl data help)

overrides: key=value or group=option, e.g. robo-rl train env=point_reach algo.batch_size=128
each command's settings and the config groups' options: robo-rl <command> --help
"""

HELP_FLAGS = ("-h", "--help")

# Errors a user can fix print as one line: every `robo_rl.errors.UserError`, and the policies' own (policies never
# import robo_rl), looked up only where already imported so that `robo-rl` does not import torch just to catch them.
POLICY_ERRORS = (("policies.bc", "BCCheckpointError"),)


class UsageError(UserError, ValueError):
    pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {
        "train": cmd_train,
        "learner": cmd_learner,
        "actor": cmd_actor,
        "eval": cmd_eval,
        "show": cmd_show,
        "keys": cmd_keys,
        "data": _cmd_data,
        "bc": cmd_bc,
        "distill": cmd_distill,
        "record": _cmd_record,
        "gui": cmd_gui,
        "reward": _cmd_reward,
        "critic": _cmd_critic,
        "doctor": _cmd_doctor,
        "calibrate": _cmd_calibrate,
        "launch": _cmd_launch,
    }
    if not argv or argv[0] in (*HELP_FLAGS, "help"):
        if len(argv) > 1 and argv[1] in commands:  # robo-rl help train
            return main([argv[1], "--help"])
        print(USAGE)
        return 0 if argv else 2
    command, overrides = argv[0], argv[1:]
    if command not in commands:
        import difflib

        close = difflib.get_close_matches(command, list(commands), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        print(f"robo-rl: error: unknown command '{command}'{hint} (one of: {', '.join(commands)})", file=sys.stderr)
        return 2
    if any(a in HELP_FLAGS for a in overrides):
        if command == "data":
            overrides = ["help"]
        else:
            from robo_rl.commands.help import command_help

            print(command_help(command))
            return 0
    try:
        return commands[command](overrides)
    except Exception as e:
        if not isinstance(e, _user_errors()):
            raise
        print(f"robo-rl {command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"robo-rl {command}: interrupted", file=sys.stderr)
        return 130


def _user_errors() -> tuple[type, ...]:
    found = [getattr(sys.modules[m], name) for m, name in POLICY_ERRORS if m in sys.modules]
    return (UserError, *found)


def _cmd_data(args: list[str]) -> int:
    from robo_rl.commands.data import cmd_data

    return cmd_data(args)


def _cmd_record(args: list[str]) -> int:
    from robo_rl.commands.record import cmd_record

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # device errors show
    return cmd_record(args)


def _cmd_launch(args: list[str]) -> int:
    from launch.launcher import cmd_launch  # the launchers are not part of the core: imported only by this command

    return cmd_launch(args)


def _cmd_doctor(args: list[str]) -> int:
    from hardware.doctor import cmd_doctor  # robot tools live with the drivers; the core never imports them itself

    return cmd_doctor(args)


def _cmd_calibrate(args: list[str]) -> int:
    from hardware.calibrate import cmd_calibrate

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return cmd_calibrate(args)


def _cmd_reward(args: list[str]) -> int:
    from robo_rl.commands.reward import cmd_reward

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return cmd_reward(args)


def _cmd_critic(args: list[str]) -> int:
    from robo_rl.rewards.remote import cmd_critic

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return cmd_critic(args)


def _setup_logging(cfg, log_file: Path | None = None) -> None:
    handlers = [logging.StreamHandler()]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file))
    logging.basicConfig(
        level=cfg.logger.level, format="%(asctime)s %(name)s %(levelname)s: %(message)s", handlers=handlers, force=True
    )


def _run_dir_for(cfg) -> Path:
    from robo_rl.config import save_config
    from robo_rl.runs import new_run_dir

    if cfg.run_dir:
        run_dir = Path(cfg.run_dir)
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    elif cfg.resume:
        run_dir = Path(cfg.resume)
    else:
        run_dir = new_run_dir(cfg.outputs_dir, cfg.name)
    if not (run_dir / "config.yaml").exists():
        save_config(cfg, run_dir / "config.yaml")
    return run_dir


def _sigterm_as_interrupt() -> None:
    """`kill` (SIGTERM) shuts a process down like Ctrl-C: the learner still writes its checkpoint; only the first
    of several signals interrupts."""
    from robo_rl.shutdown import interrupt_once

    interrupt_once()


def cmd_keys(args: list[str]) -> int:
    if len(args) < 2 or args[0] != "generate":
        raise UsageError("usage: robo-rl keys generate <dir> [actor ids ...] (default actor id: actor-0)")
    from robo_rl.transport.security import generate_keys

    keys_dir, actors = args[1], args[2:] or ["actor-0"]
    try:
        files = generate_keys(keys_dir, actors)
    except FileExistsError as e:
        raise UsageError(str(e)) from None
    for f in files:
        print(f)
    print(
        f"the learner accepts the actors whose public keys are in {keys_dir}/authorized/; "
        f"copy {keys_dir}/learner.key and each actor's own .key/.key_secret to its machine, "
        f"and set transport.curve_keys_dir={keys_dir} on both sides"
    )
    return 0


def cmd_show(overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    from robo_rl.config import config_hash, load_config

    cfg = load_config(overrides)
    print(OmegaConf.to_yaml(cfg), end="")
    print(f"# config hash: {config_hash(cfg)}")
    return 0


def cmd_learner(overrides: list[str]) -> int:
    from robo_rl.config import load_config
    from robo_rl.learner import Learner

    cfg = load_config(overrides)
    fresh = not cfg.run_dir and not cfg.resume  # this command makes the run folder, so a failed start removes it
    run_dir = _run_dir_for(cfg)
    alone = os.environ.get(STARTED_BY_ENV) != "train"  # `train` already sends this process's output to learner.log
    log_copy = _copy_stdout_to(run_dir / "learner.log") if alone else None
    _setup_logging(cfg, run_dir / "learner.log" if alone else None)
    print(f"learner: run folder {run_dir}", flush=True)
    _sigterm_as_interrupt()
    try:
        learner = Learner(cfg, run_dir, progress=cfg.logger.progress)
    except BaseException:
        if fresh:
            import shutil

            _close_log_copy(log_copy)
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        reason = learner.run()
    finally:
        pid_file = run_dir / "learner.pid"
        if pid_file.exists() and pid_file.read_text() == str(os.getpid()):
            pid_file.unlink()  # a pid file left behind would name a process that is gone
    print(f"learner: {reason}; checkpoints in {run_dir / 'checkpoints'}", flush=True)
    try:
        if reason == "done" and alone:  # `train` evaluates after stopping its actor; a learner alone does it here
            cmd_eval([f"checkpoint={run_dir}", *[o for o in overrides if o.startswith("eval.")]], training_report=True)
    finally:
        _close_log_copy(log_copy)
    return 0 if reason == "done" else 130


STARTED_BY_ENV = "ROBO_RL_STARTED_BY"  # set to "train" for the learner and actor processes `train` starts


class _Tee:
    """A text stream that writes to a terminal stream and a log file (what a learner started alone prints)."""

    def __init__(self, stream, file) -> None:
        self.stream, self.file = stream, file

    def write(self, text: str) -> int:
        if not self.file.closed:
            self.file.write(text)
            self.file.flush()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _copy_stdout_to(path: Path) -> _Tee:
    sys.stdout = _Tee(sys.stdout, open(path, "a"))
    return sys.stdout


def _close_log_copy(tee: _Tee | None) -> None:
    if tee is not None:
        if sys.stdout is tee:
            sys.stdout = tee.stream
        tee.file.close()


def cmd_actor(overrides: list[str]) -> int:
    from robo_rl.actor import Actor
    from robo_rl.config import load_config

    cfg = load_config(overrides)
    _setup_logging(cfg)
    _sigterm_as_interrupt()
    reason = Actor(cfg, progress=cfg.logger.progress).run()
    print(f"{cfg.actor.id}: {reason}", flush=True)
    return 0 if reason == "done" else 130


def cmd_eval(overrides: list[str], training_report: bool = False) -> int:
    """Evaluate a checkpoint; the report goes to <run>/eval/step_<N>/ (`training_report`: <run>/eval/, the
    report of the training run itself, written by `train` and by a learner started alone). With suite=<name> (or a
    person scoring, eval.score=human), and `eval compare` / `eval sim_vs_real`: robo_rl/eval/suite.py."""
    if overrides and overrides[0] in ("compare", "sim_vs_real"):
        from robo_rl.eval.suite import cmd_eval_compare

        return cmd_eval_compare(overrides[0], overrides[1:])
    from robo_rl.eval.suite import cmd_eval_suite, wants_suite_runner

    if not training_report and wants_suite_runner(overrides):  # a run's own report stays the plain one
        return cmd_eval_suite(overrides)
    from robo_rl.config import load_config, load_saved_config, make_policy, override_value

    ckpt_arg = override_value(overrides, "checkpoint")
    if not ckpt_arg:
        raise UsageError("eval needs checkpoint=<file.pt or run folder>")
    rest = [o for o in overrides if not o.startswith("checkpoint=")]

    def config_of(run_dir: Path | None):  # the env the checkpoint was trained on, when its run folder says
        if run_dir is not None and (run_dir / "config.yaml").exists():
            return load_saved_config(run_dir / "config.yaml", rest)
        return load_config(rest)

    given = Path(ckpt_arg)
    guessed = given if given.is_dir() else given.parent.parent if given.parent.name == "checkpoints" else None
    cfg = config_of(guessed)  # a config error answers before torch and the simulators are imported
    from robo_rl.eval.episodes import evaluate_policy, write_report
    from robo_rl.runs import CheckpointError, load_newest_readable

    payload, skipped = load_newest_readable(ckpt_arg)
    for problem in skipped:
        print(f"warning: {problem}: skipped, evaluating the checkpoint before it", file=sys.stderr)
    path = Path(payload["path"])
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    if run_dir != guessed:
        cfg = config_of(run_dir)
    if run_dir is not None:
        out_dir = run_dir / "eval" if training_report else run_dir / "eval" / path.stem
    else:
        out_dir = path.parent / "eval" / path.stem
    import torch

    torch.set_num_threads(cfg.torch_threads)
    from robo_rl.envs.wrappers import make_guarded_env

    env = make_guarded_env(cfg)  # a robot is evaluated behind its safety layer, as it was trained
    try:
        policy = make_policy(cfg, env)
        try:
            policy.load_state_dict(payload["algo"]["policy"])
        except (KeyError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this policy/env config ({str(e)[:120]})") from None
        video = bool(cfg.eval.get("video", False))
        result = evaluate_policy(
            env,
            policy.eval(),
            cfg.eval.episodes,
            cfg.eval.seed,
            progress=cfg.logger.progress,
            video_dir=out_dir / "videos" if video else None,
            video_episodes=int(cfg.eval.get("video_episodes", 0)),
        )
    finally:
        env.close()
    env_steps = int(payload["counters"]["env_steps"])
    low, high = result["success_ci95"]
    print(
        f"success {result['successes']}/{result['episodes']} = {result['success_rate']:.2f} "
        f"(Wilson 95% CI [{low:.2f}, {high:.2f}]), mean length {result['mean_length']:.1f}"
    )
    metrics = run_dir / "metrics.jsonl" if run_dir is not None else None
    print(f"report: {write_report(out_dir, result, str(path), env_steps, metrics)}")
    return 0


def cmd_bc(overrides: list[str]) -> int:
    """Behaviour-clone a base policy: demonstrations first (a bad dataset stops before a run folder exists)."""
    from robo_rl.config import load_config

    cfg = load_config(overrides)  # a bad setting is refused before torch is imported
    from robo_rl.offline.bc import load_bc_data, train_bc

    data = load_bc_data(cfg, progress=cfg.logger.progress)
    run_dir = _run_dir_for(cfg)
    print(
        f"run folder: {run_dir}\ndemonstrations: {data.episodes} episodes ({data.val_episodes} held out) "
        f"from {data.source}"
    )
    s = train_bc(cfg, run_dir, data, progress=cfg.logger.progress)
    val = "n/a" if s["val_loss"] is None else f"{s['val_loss']:.4f}"
    print(
        f"trained {s['epochs']} epochs in {s['train_s']:.1f} s: train loss {s['train_loss']:.4f}, "
        f"validation loss {val} (best epoch {s['best_epoch']})"
    )
    if "eval" in s:
        e = s["eval"]
        print(
            f"success {e['successes']}/{e['episodes']} = {e['success_rate']:.2f} (Wilson 95% CI "
            f"[{e['success_ci95'][0]:.2f}, {e['success_ci95'][1]:.2f}]), base inference "
            f"{e.get('base_inference_ms_p50', float('nan')):.2f} ms (p50)"
        )
    print(f"checkpoint: {s['checkpoint']}")
    return 0


def cmd_distill(overrides: list[str]) -> int:
    """One-step distillation of a flow/diffusion policy or a DSRL run (`robo_rl/offline/distill.py`)."""
    from robo_rl.config import load_config

    cfg = load_config(overrides)  # a bad setting is refused before torch is imported
    if not cfg.checkpoint:
        raise UsageError("distill needs checkpoint=<a flow/diffusion bc/policy.pt, its run folder, or a DSRL run>")
    if not Path(cfg.checkpoint).exists():  # before a run folder is made for nothing
        raise UsageError(
            f"distill: checkpoint {cfg.checkpoint} does not exist (a flow/diffusion bc/policy.pt, its "
            "run folder, or a DSRL run)"
        )
    from robo_rl.offline.distill import distill

    run_dir = _run_dir_for(cfg)
    print(f"run folder: {run_dir}")
    s = distill(cfg, run_dir, progress=cfg.logger.progress)
    teacher = s["distilled_from"]
    print(
        f"distilled {teacher['kind']} teacher {teacher['path']} in {s['train']['train_s']:.0f} s "
        f"(final loss {s['train']['final_loss']:.5f})"
    )
    if "student" in s:
        t, o = s["teacher"], s["student"]
        for name, r in (("teacher", t), ("one-step", o)):
            print(
                f"{name:>8}: success {r['successes']}/{r['episodes']} = {r['success_rate']:.2f}, inference "
                f"p50 {r['base_inference_ms_p50']:.2f} ms, p99 {r['base_inference_ms_p99']:.2f} ms"
            )
        print(f"one step is {s['speedup_p50']:.1f}x faster (p50), success {s['success_points']:+.0f} points")
    print(f"checkpoint: {s['checkpoint']} (a flow policy: policy=flow policy.path=..., or a DSRL/residual base)")
    return 0


def cmd_gui(overrides: list[str]) -> int:
    """The GUI process: actors connect to gui.zmq_host:zmq_port, pages to http://gui.host:gui.port/."""
    from robo_rl.config import load_config
    from robo_rl.gui.server import serve

    cfg = load_config(overrides)
    _setup_logging(cfg)
    _sigterm_as_interrupt()
    try:
        serve(cfg)
    except KeyboardInterrupt:
        pass
    return 0


def cmd_train(overrides: list[str]) -> int:
    from robo_rl.commands.train import train

    return train(overrides)


if __name__ == "__main__":
    os.environ.setdefault("MUJOCO_GL", "egl")
    sys.exit(main())
