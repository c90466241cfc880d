"""`robo-rl <command> [key=value ...]`: a table of commands, each a module of `robo_rl/commands/`.

The command's module is imported only when it runs, so `robo-rl <command> --help` and a config error answer
without importing torch or the simulators. Errors a user can fix (`robo_rl.errors.UserError`) print as one line.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from robo_rl.errors import UserError

USAGE = """usage: robo-rl <command> [overrides ...]

commands:
  train     record demonstrations, start a learner and an actor process, train, evaluate
  launch    start a layout's processes (learner, N actors, GUI, critic; over SSH too) with one status line each
  learner   start the learner alone (binds transport.* ports on loopback)
  actor     start one actor alone (connects to the learner at transport.host)
  eval      evaluate a checkpoint: robo-rl eval checkpoint=<file.pt or run folder>
            suites: eval checkpoint=<run> suite=<name>; eval compare <run> <run> ... suite=<name>
            episodes a comparison needs: eval plan baseline=0.55 gain=0.10 [paired=true]
  bc        behaviour-clone a base policy (an MLP, or policy=flow|diffusion) into <run>/bc/policy.pt, evaluate it
  distill   a K-step flow/diffusion policy (or a DSRL run) into a one-step flow: robo-rl distill checkpoint=<..>
  gate      accept a candidate policy only if fitted Q evaluation says it beats the current one by a margin:
            robo-rl gate <current> <candidate> data=<run or dataset> [margin=0.05] [eval_episodes=N]
  record    record demonstrations with a teleop device: robo-rl record <dst> [human=keyboard] [episodes=20]
  reward    robo-rl reward train|eval ...: a learned reward model from recorded episodes, and its quality
  reset-check  robo-rl reset-check label|train|eval ...: a camera classifier as the reset check, and its quality
  critic    robo-rl critic serve model=<folder> [host=] [port=5600]: a reward model for actors elsewhere
  policy    robo-rl policy serve <checkpoint> [host=] [port=5610]: a base policy (a VLA on a GPU) for actors elsewhere
  gui       the intervention page for running actors (http://127.0.0.1:8765/); train gui=true starts it too
  doctor    check a robot workstation (arm, cameras, rate, workspace, e-stop, watchdog): doctor env=so101 | twin=so101
  calibrate record an arm's workspace box and home pose by moving it: calibrate env=so101 [out=<file>]
  show      print the composed config
  keys      robo-rl keys generate <dir> [actor ids ...]: CURVE keys for links off loopback
  data      robo-rl data inspect|convert|record ...: episodes in run folders, replay stores, LeRobot
            datasets and robomimic files (robo-rl data help)
  vla       robo-rl vla train dataset=<LeRobot dataset> out=<dir>: a SmolVLA trained by lerobot-train, a base by path
  recap     robo-rl recap collect|label|finetune|tune <run>: advantage-conditioned improvement (RECAP, STEAM)

overrides: key=value or group=option, e.g. robo-rl train env=point_reach algo.batch_size=128
each command's settings and the config groups' options: robo-rl <command> --help
"""

HELP_FLAGS = ("-h", "--help")

# command -> "module:function"; robot tools and launchers live with the drivers and launchers, reached only here
COMMANDS = {
    "train": "robo_rl.commands.train:cmd_train",
    "launch": "robo_rl.commands.launch:cmd_launch",
    "learner": "robo_rl.commands.run:cmd_learner",
    "actor": "robo_rl.commands.run:cmd_actor",
    "eval": "robo_rl.commands.eval:cmd_eval",
    "bc": "robo_rl.commands.offline:cmd_bc",
    "distill": "robo_rl.commands.offline:cmd_distill",
    "gate": "robo_rl.commands.gate:cmd_gate",
    "record": "robo_rl.commands.record:cmd_record",
    "reward": "robo_rl.commands.reward:cmd_reward",
    "reset-check": "robo_rl.commands.reset_check:cmd_reset_check",
    "critic": "robo_rl.commands.critic:cmd_critic",
    "policy": "robo_rl.commands.policy_serve:cmd_policy",
    "gui": "robo_rl.commands.gui:cmd_gui",
    "doctor": "robo_rl.commands.robot:cmd_doctor",
    "calibrate": "robo_rl.commands.robot:cmd_calibrate",
    "show": "robo_rl.commands.show:cmd_show",
    "keys": "robo_rl.commands.keys:cmd_keys",
    "data": "robo_rl.commands.data:cmd_data",
    "vla": "robo_rl.commands.vla:cmd_vla",
    "recap": "robo_rl.commands.recap:cmd_recap",
}
# commands whose devices, models or drivers report through logging before any config sets a level
LOG_LEVELS = {
    "record": logging.INFO,
    "critic": logging.INFO,
    "reward": logging.WARNING,
    "reset-check": logging.WARNING,
    "calibrate": logging.WARNING,
}

# The policies' own user errors (policies never import robo_rl), looked up only where already imported, so that
# `robo-rl` does not import torch just to catch them.
POLICY_ERRORS = (("policies.bc", "BCCheckpointError"), ("policies.vla_checks", "BaseMismatchError"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in (*HELP_FLAGS, "help"):
        if len(argv) > 1 and argv[1] in COMMANDS:  # robo-rl help train
            return main([argv[1], "--help"])
        print(USAGE)
        return 0 if argv else 2
    command, overrides = argv[0], argv[1:]
    if command not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        print(f"robo-rl: error: unknown command '{command}'{hint} (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    if any(a in HELP_FLAGS for a in overrides):
        if command in ("data", "vla", "recap"):  # their own help pages
            overrides = ["help"]
        else:
            from robo_rl.commands.help import command_help

            print(command_help(command))
            return 0
    from robo_rl.quiet import quiet_library_noise

    quiet_library_noise()  # every command, before it imports a simulator or lerobot
    if command in LOG_LEVELS:
        logging.basicConfig(level=LOG_LEVELS[command], format="%(levelname)s %(name)s: %(message)s")
    module, _, function = COMMANDS[command].partition(":")
    try:
        return getattr(importlib.import_module(module), function)(overrides)
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


if __name__ == "__main__":
    os.environ.setdefault("MUJOCO_GL", "egl")
    sys.exit(main())
