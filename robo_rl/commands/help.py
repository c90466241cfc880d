"""`robo-rl <command> --help`: what a command does, its main settings, and the options of every config group.

Settings' meanings and ranges come from `robo_rl.configs.settings` (a typed block's, e.g. `algo`'s, from the fields
of the default option's dataclass), group options from the YAML files in launch/conf/ (the first comment line of each
is its description), defaults from the composed config with its typed blocks completed.
"""

from __future__ import annotations

from robo_rl.config import complete_typed_blocks, config_groups, group_options
from robo_rl.configs.settings import SETTINGS, TYPED_BLOCKS, Setting, typed_config, typed_prefix
from robo_rl.configs.typed import settings_of

OVERRIDES = "overrides: key=value (e.g. algo.batch_size=128) or group=option (e.g. env=point_reach)"
DESCRIBE_GROUPS = ("train", "show")  # the pages that describe every group option; the others name them in a line

# command -> (usage line, what it does, its main settings, whether config groups apply)
COMMANDS: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "train": (
        "robo-rl train [overrides ...]",
        "Record (or reuse cached) scripted demonstrations, start a learner and an actor process on this machine,\n"
        "train until train.total_env_steps online steps, then evaluate the last checkpoint (eval.episodes).\n"
        "Writes a run folder under outputs_dir: config.yaml, logs, metrics.jsonl, checkpoints/, replay/, eval report.",
        (
            "name",
            "seed",
            "device",
            "train.total_env_steps",
            "train.learning_starts",
            "train.utd",
            "demos.num_episodes",
            "demos.path",
            "algo.batch_size",
            "eval.episodes",
            "resume",
            "outputs_dir",
        ),
        True,
    ),
    "launch": (
        "robo-rl launch <layout or path.yaml> [launch.<setting>=<value> ...] [overrides ...]",
        "Start the processes a layout names (launch/layouts/; robo-rl launch alone lists them) with free ports and\n"
        "one run folder (logs in <run>/logs/<name>.log), one status line per process; a crashed actor is restarted\n"
        "(launch.max_restarts), the learner's end ends the launch, Ctrl-C stops every process. Processes with host:\n"
        "start over SSH (CURVE keys made and copied once); launch.ray=true places them on a Ray cluster (many sim\n"
        "actors). The overrides apply to every process; launch.<setting>= sets the layout's own (actors=N, ...).",
        (),
        False,
    ),
    "learner": (
        "robo-rl learner [overrides ...]",
        "Start the learner alone: it binds the transport ports on transport.host, receives transitions from\n"
        "actors, updates the algorithm and publishes the policy's weights. Start actors with `robo-rl actor`.",
        (
            "run_dir",
            "resume",
            "device",
            "train.total_env_steps",
            "train.utd",
            "algo.batch_size",
            "replay.storage",
            "transport.host",
            "transport.data_port",
            "transport.curve_keys_dir",
        ),
        True,
    ),
    "actor": (
        "robo-rl actor [overrides ...]",
        "Start one actor alone: it runs the env and the policy, streams transitions to the learner at\n"
        "transport.host and takes new weights as they arrive. Actor and learner must share env and policy settings.",
        (
            "actor.id",
            "transport.host",
            "transport.data_port",
            "transport.curve_keys_dir",
            "actor.apply_weights",
            "actor.realtime",
            "seed",
        ),
        True,
    ),
    "eval": (
        "robo-rl eval checkpoint=<file.pt or run folder> [suite=<name>] [overrides ...]\n"
        "       robo-rl eval compare <run or report> <run or report> ... [suite=<name>] [gain=0.1] [out=<folder>]\n"
        "       robo-rl eval compare <recipe>=<run>,<run>,... <recipe>=... | by=recipe <runs> [suite=<name>] [reps=]\n"
        "       robo-rl eval sim_vs_real <run> [suite=<name>] | sim_vs_real <sim report> <real report>\n"
        "       robo-rl eval plan baseline=<rate> gain=<change> [power=0.8] [alpha=0.05] [paired=true] [episode_s=<s>]",
        "Evaluate a checkpoint on eval.episodes seeded episodes and print the success rate with its 95% interval.\n"
        "With a run folder, its saved config is the base (the env it was trained on); env.* overrides change the\n"
        "task, e.g. env.cube_xy_range_m=[0.15,0.15]. Writes an eval report into the run folder, of the evaluated\n"
        "checkpoint eval.select picks (the highest Wilson lower bound by default), with successes per hour.\n"
        "suite=<name> (launch/conf/suite/, or a .yaml) runs each of the suite's conditions (config overrides) on the\n"
        "same seeds in eval.workers env processes; <run>/eval/<suite>/report.{md,html,json}: success with Wilson\n"
        "intervals, lengths, wall times, failure modes, a success and a failure clip per condition (eval.video=false:\n"
        "none). compare puts runs side by side on one suite (Fisher's exact test per condition, the gain its episodes\n"
        "could detect at 80% power, and 'underpowered' where a null result cannot rule out gain=, default +0.10);\n"
        "given recipes of several seeds (by=recipe: each run's config name and seed), it aggregates their success\n"
        "with rliable: IQM, optimality gap, probability of improvement (95% bootstrap intervals), profiles;\n"
        "plan prints the episodes per arm a comparison needs (paired=true: on the same seeds, correlation= of their\n"
        "outcomes). On a real robot a person resets the scene before each episode (a device's success button or\n"
        "Enter) and, with eval.score=human, labels each one; its report goes to <suite>_real/, and sim_vs_real sets\n"
        "it beside the simulator's.",
        (
            "checkpoint",
            "eval.suite",
            "eval.workers",
            "eval.score",
            "eval.episodes",
            "eval.seed",
            "eval.video",
            "eval.select",
            "env.cube_xy_range_m",
            "env.max_episode_steps",
        ),
        True,
    ),
    "bc": (
        "robo-rl bc [overrides ...]",
        "Behaviour-clone a base policy: record (or reuse cached) scripted demonstrations, or read demos.path, train\n"
        "an MLP that predicts bc.chunk_size actions (early-stopped on held-out episodes), or with policy=flow |\n"
        "diffusion a flow-matching / diffusion policy of policy.chunk_size actions, write <run>/bc/policy.pt (the\n"
        "base a residual or DSRL learner or an actor loads) and evaluate it on bc.eval_episodes sim episodes.",
        (
            "demos.num_episodes",
            "demos.noise_std",
            "demos.path",
            "bc.chunk_size",
            "bc.hidden",
            "bc.epochs",
            "bc.batch_size",
            "bc.lr",
            "bc.val_fraction",
            "bc.images",
            "bc.eval_episodes",
            "device",
        ),
        True,
    ),
    "distill": (
        "robo-rl distill checkpoint=<flow/diffusion bc/policy.pt, its run folder, or a DSRL run> [overrides ...]",
        "Distil a K-step flow/diffusion policy (as trained, or as a DSRL run fine-tuned it) into a one-step flow\n"
        "policy of the same noise: regress it onto the teacher's chunks on the demonstrations' states and the\n"
        "teacher's own rollouts, then evaluate both on the same seeds (success, inference p50/p99). Writes\n"
        "<run>/distill/policy.pt (loads as experiment=rlpd policy=flow policy.path=..., or as a DSRL/residual base)\n"
        "and report.json.",
        (
            "checkpoint",
            "distill.iterations",
            "distill.batch_size",
            "distill.lr",
            "distill.rollout_episodes",
            "distill.eval_episodes",
            "eval.seed",
        ),
        True,
    ),
    "gate": (
        "robo-rl gate <current checkpoint> <candidate checkpoint> data=<run or dataset> [log=<file>] [settings]",
        "RL-100's offline-evaluation gate: fit Q of each policy by fitted Q evaluation on the data's held-out\n"
        "episodes and accept the candidate only if its estimated return beats the current one's by margin=; in sim,\n"
        "eval_episodes=N also runs both and records whether the call agreed with their real success. One JSON line\n"
        "per call in log= (default <data>/gate.jsonl); exit status 0: accepted, 1: rejected. Settings (GateConfig,\n"
        "robo_rl/configs/parl.py): margin, held_out, gamma, fqe_steps, fqe_batch_size, fqe_lr, fqe_hidden, fqe_tau,\n"
        "seed, eval_episodes.",
        (),
        False,
    ),
    "record": (
        "robo-rl record <dst> [human=keyboard] [episodes=20] [keep=success|all] [format=store|lerobot] [overrides]",
        "Drive the env with a teleop device (human=keyboard | gamepad | spacemouse | web | leader_arm | sim) at its\n"
        "control rate and record demonstrations into a replay store (use it with demos.path=<dst>) or a LeRobot\n"
        "dataset. The device's labels: success / failure end an episode, re-record discards and repeats it, abort\n"
        "ends the session. Each kept episode is on disk before the next starts. In simulation a window shows the\n"
        "scene to the person recording (where a display exists; gui.view_size=0: none).",
        ("human.takeover", "human.handback_steps", "actor.realtime", "demos.seed", "gui.view_size"),
        True,
    ),
    "show": (
        "robo-rl show [overrides ...]",
        "Print the composed config (YAML) with its config hash, after the overrides; a bad key or value is\n"
        "reported as it would be by train.",
        (),
        True,
    ),
    "doctor": (
        "robo-rl doctor env=<so101|franka|ur5e> | twin=<so101|franka|ur5e> [report=<file.json>] [overrides ...]",
        "Check a robot workstation and say what is wrong and how to fix it: the robot's SDK, serial ports / network,\n"
        "cameras, the connection, control rate and jitter through driver + safety (the arm goes home, then holds\n"
        "still), camera frame ages, the workspace box against the arm's reach, the e-stop and watchdog paths.\n"
        "twin=<robot> runs the same checks on the arm's MuJoCo twin; hardware.dry_run=true on a real config's twin.",
        ("hardware.dry_run", "safety.watchdog_s", "safety.effort_limit"),
        False,
    ),
    "calibrate": (
        "robo-rl calibrate env=<so101|franka|ur5e> [out=<file.yaml>] [mode=hand|device human=<device>] [margin_m=0.01]",
        "Record an arm's home pose and workspace box: move the arm by hand (its torque off / free-drive) or with a\n"
        "teleop device to the home pose (Enter or the device's success button), then through the corners of the\n"
        "space it may use (Enter / success again). Writes a file that hardware.calibration=<file> applies\n"
        "(safety.workspace and env.driver.home).",
        ("hardware.dry_run",),
        False,
    ),
    "gui": (
        "robo-rl gui [overrides]",
        "Serve the intervention page (http://gui.host:gui.port/) for actors started with gui=true: cameras, who is\n"
        "in control, the episode and learning health; take over, label, pause and e-stop. `train gui=true` starts it.",
        ("gui.host", "gui.port", "gui.token", "gui.zmq_port", "gui.deadman", "gui.view_size"),
        False,
    ),
    "reward": (
        "robo-rl reward train kind=classifier|progress data=<episodes> out=<folder> | reward eval model= data=",
        "Train a learned reward model (a success classifier, or a VLA-style pairwise progress critic) from recorded\n"
        "episodes, or measure one (AUROC and false successes; value-order correlation, reversed clips, a wrong\n"
        "instruction, stalled clips), PASS or FAIL beside each bar: exit status 3 when one is missed (2: a usage\n"
        "error). Use it in training with reward=model reward.model=<folder>.",
        (),
        False,
    ),
    "reset-check": (
        "robo-rl reset-check label out=<frames.npz> [scenes=72] [human=<device>] [env overrides] | train "
        "data=<frames.npz> out=<folder> | eval model=<folder> data=<frames.npz>",
        "A camera classifier as the reset check (env.reset_check=camera env.reset_classifier=<folder>): label frames\n"
        "in a simulator by its own check (a scene disturbed, then after the scripted reset) or, with human=<device>,\n"
        "by a person's presses at the robot (success: ready, failure: not ready), train the classifier\n"
        "(its threshold lets at most max_false_ready=0.01 of held-out not-ready scenes be called ready), write\n"
        "its folder with train_report.json (accuracy, not ready called ready, ready called not ready: a needless\n"
        "call), or give those figures on fresh frames.",
        (),
        False,
    ),
    "critic": (
        "robo-rl critic serve model=<folder> [host=127.0.0.1] [port=5600] [keys_dir=<dir>]",
        "Serve a saved reward model over ZeroMQ (no pickle; CURVE keys off loopback) for actors that score with\n"
        "reward=model reward.model=tcp://<host>:5600; they wait at most reward.timeout_s and fall back meanwhile.",
        (),
        False,
    ),
    "policy": (
        "robo-rl policy serve <checkpoint> [kind=bc|lerobot] [host=127.0.0.1] [port=5610] [keys_dir=<dir>] "
        "[device=cpu|cuda] [task=<text>]",
        "Serve a base policy (a robo-rl bc MLP, flow or diffusion checkpoint, or a LeRobot pretrained_model folder\n"
        "such as a VLA) over ZeroMQ (no pickle; CURVE keys off loopback) for actors that act with it as\n"
        "policy.base.kind=remote policy.base.path=tcp://<host>:5610; each chunk waits at most policy.base.timeout_s.",
        (),
        False,
    ),
    "keys": (
        "robo-rl keys generate <dir> [actor ids ...]",
        "Generate CURVE key pairs for links off loopback: <dir>/learner.key(_secret), one pair per actor\n"
        "(default actor-0) and <dir>/authorized/ with the actors' public keys. Set transport.curve_keys_dir=<dir>\n"
        "on the learner and on every actor.",
        (),
        False,
    ),
}


def command_help(command: str) -> str:
    usage, what, keys, groups = COMMANDS[command]
    lines = [f"usage: {usage}", "", what]
    defaults, choices, targets = _defaults() if keys or groups else ({}, {}, {})
    if keys:
        lines += ["", "main settings (key, default: meaning; allowed values):"]
        width = max(len(k) for k in keys)
        for key in keys:
            s = _setting(key, targets)
            default = defaults.get(key, "")
            lines.append(f"  {key:<{width}}  {default}: {s.meaning}; {s.allowed()}")
        lines.append("  every key: robo-rl show [overrides]")
    if groups and command not in DESCRIBE_GROUPS:
        lines += [
            "",
            OVERRIDES,
            "",
            "config groups (group: options; * = default; what each option is: robo-rl show --help):",
        ]
        for group in config_groups():
            lines.append(
                f"  {group}: " + ", ".join(("*" if choices.get(group) == o else "") + o for o in group_options(group))
            )
    elif groups:
        lines += ["", OVERRIDES, "", "config groups (group=option; * = default):"]
        for group in config_groups():
            lines.append(f"  {group}:")
            options = group_options(group)
            width = max((len(o) for o in options), default=0)
            for option, text in options.items():
                mark = "*" if choices.get(group) == option else " "
                lines.append(f"   {mark}{option:<{width}}  {text}")
    return "\n".join(lines)


def _setting(key: str, targets: dict[str, str]) -> Setting:
    """A key's setting: in a typed block, the field of the default option's own dataclass (PPO's batch_size is its
    minibatch), else the table's."""
    prefix = typed_prefix(key) or ""
    name = key[len(prefix) + 1 :]
    cls = typed_config(prefix, targets.get(prefix))
    return (settings_of(cls).get(name) if cls is not None else None) or SETTINGS[key]


def _defaults() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Default values of the settings as text, the default option of each group and each typed block's `_target_`
    ({} if the tree is broken)."""
    try:
        from omegaconf import OmegaConf

        cfg = _compose_with_choices()
        choices = {k: v for k, v in cfg.hydra.runtime.choices.items() if "/" not in k}
        complete_typed_blocks(cfg)
        targets = {p: OmegaConf.select(cfg, f"{p}._target_", default=None) for p in TYPED_BLOCKS}
        values = {}
        for key in SETTINGS:
            value = OmegaConf.select(cfg, key, default=None)
            values[key] = _text(OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
        return values, choices, targets
    except Exception:  # help still answers with a broken config tree
        return {}, {}, {}


def _compose_with_choices():
    from hydra import compose, initialize_config_dir

    from robo_rl.config import CONF_DIR, register_resolvers

    register_resolvers()  # the defaults shown read through them (algo.target_q_clip's sparse_return_range)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", return_hydra_config=True)


def _text(value) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
