"""`robo-rl recap`: advantage-conditioned improvement (RECAP, π*0.6; STEAM with recap.value=steam), one iteration
as three commands over a run folder (robo_rl/offline/recap*.py says what each computes).

    robo-rl bc env=pick_cube policy=flow                      the base: <run>/bc/policy.pt (and its demonstrations)
    robo-rl recap collect <run> episodes=200                  the base acts; episodes into <run>/replay/online/
    robo-rl recap label <run>                                  value, advantages, indicator: <run>/recap/labels.*
    robo-rl recap finetune <run>                               the conditioned policy: <run>/recap/policy.pt
    robo-rl recap tune <run>                                   its guidance scale, chosen on validation episodes
    robo-rl recap collect <run> episodes=200                  the next iteration acts with <run>/recap/policy.pt
"""

from __future__ import annotations

import json
from pathlib import Path

from robo_rl.errors import UserError

# recap tune's scales: a geometric grid, since the best scale varies by task (Lift's fine-tuned policies, 2026-12-01:
# 0.62 at w = 2, 0.80 at 8, 0.88 at 12, 0.84 at 16 on 200 validation episodes; pick's best is 2-3), and its
# validation episodes per scale (bench/methods.py uses both)
GUIDANCES, TUNE_EPISODES = "1,2,4,8,16", 30

USAGE = f"""usage: robo-rl recap <collect|label|finetune|tune> ... [recap.<setting>=<value> ...]

  collect <run> [policy=<file.pt | SmolVLA folder>] [episodes=50] [seed=100000] [guidance=<w>] [store=true]
          [task=<text>] [<config overrides>]
      a flow policy (default <run>/recap/policy.pt, else <run>/recap/vla/.../pretrained_model, else
      <run>/bc/policy.pt) on the run's env, sampled with guidance w (default: the checkpoint's); episodes appended
      to <run>/replay/online/; success with its interval. A new <run> takes its env from the overrides
      (policy= needed); task= is a VLA's task text where the env gives no instruction
  label <run | replay store | LeRobot dataset> [data=<more paths, comma separated>] [demos=true] [out=<dir>]
      the value fit, n-step advantages and the positive indicator of every ended episode there (a run folder's
      cached demonstrations too, unless demos=false), written beside the data: <path>/recap/labels.parquet
  finetune <run | labels folder> [base=<file.pt | SmolVLA folder or hub id>] [out=<file.pt | folder>] [task=<text>]
      the base (default <run>/bc/policy.pt) fine-tuned conditioned on the labels: <run>/recap/policy.pt; a SmolVLA
      by lerobot-train with the label in its prompt: <run>/recap/vla/lerobot/checkpoints/last/pretrained_model
  tune <run> [policy=<file.pt | folder>] [guidances={GUIDANCES}] [episodes={TUNE_EPISODES}] [seed=300000] [task=<text>]
       [<config overrides>]
      the fine-tuned policy (default <run>/recap/policy.pt) at each guidance scale on the same validation episodes
      (not stored); the best becomes the checkpoint's guidance, the table <policy>.guidance.json

settings (recap.<name>=<value>): robo_rl/configs/recap.py, e.g. recap.positive_share=0.3 recap.value=steam
"""


class RecapUsageError(UserError, ValueError):
    pass


def recap_settings(options: dict[str, str]):
    """The `recap.*` options as RecapConfig (each value read as YAML); a bad one refused in one line."""
    import yaml

    from robo_rl.config import ConfigError
    from robo_rl.configs.recap import RecapConfig
    from robo_rl.configs.typed import config_from

    given = {}
    for key, text in options.items():
        try:
            given[key[len("recap.") :]] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"{key}={text} is not a value") from None
    try:
        return config_from(RecapConfig, given, "recap")
    except ValueError as e:
        raise ConfigError(str(e)) from None


def split_args(args: list[str], known: tuple[str, ...], overrides: bool = False):
    """(positional, known options, recap settings, config overrides); an unknown option refused by name."""
    positional = [a for a in args if "=" not in a]
    pairs = [a.split("=", 1) for a in args if "=" in a]
    opts = {k: v for k, v in pairs if k in known}
    settings = {k: v for k, v in pairs if k.startswith("recap.")}
    rest = [f"{k}={v}" for k, v in pairs if k not in known and not k.startswith("recap.")]
    if rest and not overrides:
        raise RecapUsageError(f"unknown option {rest[0].split('=')[0]} (known: {', '.join(known)}, recap.<setting>)")
    return positional, opts, recap_settings(settings), rest


def one_path(positional: list[str], verb: str) -> Path:
    if len(positional) != 1:
        raise RecapUsageError(f"recap {verb} takes one path\n{USAGE}")
    path = Path(positional[0])
    if not path.exists():
        raise RecapUsageError(f"recap {verb}: {path} does not exist")
    return path


def cmd_recap(args: list[str]) -> int:
    if not args or args[0] in ("help", "-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    commands = {"collect": cmd_collect, "label": cmd_label, "finetune": cmd_finetune, "tune": cmd_tune}
    if verb not in commands:
        raise RecapUsageError(f"unknown recap command '{verb}' (one of: {', '.join(commands)})")
    return commands[verb](rest)


def run_demos(run: Path) -> list[Path]:
    """The demonstrations a run folder's `robo-rl bc` learned from (its bc/summary.json names them), if still there."""
    summary = run / "bc" / "summary.json"
    if not summary.exists():
        return []
    source = json.loads(summary.read_text()).get("demonstrations")
    return [Path(source)] if source and Path(source).exists() else []


def cmd_label(args: list[str]) -> int:
    positional, opts, settings, _ = split_args(args, ("data", "demos", "out", "device"))
    path = one_path(positional, "label")
    paths = [path, *(Path(p) for p in opts.get("data", "").split(",") if p)]
    if path.is_dir() and opts.get("demos", "true").lower() == "true":
        paths += [p for p in run_demos(path) if p not in paths]
    for p in paths:
        if not p.exists():
            raise RecapUsageError(f"recap label: data {p} does not exist")
    from robo_rl.offline.recap import label

    out = Path(opts["out"]) if opts.get("out") else None
    s = label(paths, settings, out, opts.get("device", "cpu"))
    print(f"labelled {s['rows']} actions of {s['episodes']} episodes ({s['episodes_left_out']} not ended, left out)")
    print(f"data: {', '.join(s['data'])}")
    print(
        f"value ({settings.value}, version {s['value_version']}): {json.dumps(s['value_fit'])}; positive share "
        f"{s['positive_share']:.3f} (thresholds {s['thresholds']}); success in the data {s['success_rate']:.2f}"
    )
    print(f"labels: {s['sidecar']}")
    return 0


def cmd_finetune(args: list[str]) -> int:
    positional, opts, settings, _ = split_args(args, ("base", "out", "device", "task"))
    path = one_path(positional, "finetune")
    labels = path if (path / "labels.parquet").exists() else path / "recap"
    from robo_rl.offline.recap_vla import VLA_DIR, finetune_vla, is_vla

    if opts.get("base") and is_vla(opts["base"]):
        out = Path(opts["out"]) if opts.get("out") else labels / VLA_DIR
        model, s = finetune_vla(labels, opts["base"], out, settings, opts.get("task"), device=opts.get("device", "cpu"))
        print(
            f"fine-tuned {s['updates']} lerobot-train steps in {s['train_s']:.0f} s on {s['frames']} frames of "
            f"{s['episodes']} episodes ({s['positive_frames']:.2f} positive, label dropped {s['dropout_rate']:.3f})"
        )
        print(f"checkpoint: {model} (guidance {s['guidance']}; policy=<it> for recap collect and tune)")
        return 0
    base = Path(opts["base"]) if opts.get("base") else path / "bc" / "policy.pt"
    if not base.exists():
        raise RecapUsageError(
            f"recap finetune: base {base} does not exist (base=<a flow bc/policy.pt, or a SmolVLA folder>)"
        )
    out = Path(opts["out"]) if opts.get("out") else labels / "policy.pt"
    from robo_rl.offline.recap_train import finetune

    _, s = finetune(labels, base, out, settings, opts.get("device", "cpu"))
    print(
        f"fine-tuned {s['updates']} steps in {s['train_s']:.0f} s on {s['rows']} chunks of {s['episodes']} episodes "
        f"({s['positive_rows']:.2f} positive, label dropped {s['dropout_rate']:.3f}): loss {s['final_loss']:.4f}"
    )
    print(f"checkpoint: {out} (guidance {s['guidance']}; a flow policy: policy=flow policy.path=<it>)")
    return 0


def run_config(run: Path, overrides: list[str], verb: str):
    """The run folder's config with `overrides`; a new (or empty) folder gets one composed from them, saved there."""
    from robo_rl.config import load_config, load_saved_config, save_config

    if (run / "config.yaml").exists():
        return load_saved_config(run / "config.yaml", overrides)
    if run.exists() and (not run.is_dir() or any(run.iterdir())):
        raise RecapUsageError(f"recap {verb}: {run} is not a run folder (no config.yaml) and not empty")
    cfg = load_config(overrides)
    run.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run / "config.yaml")
    print(f"new run folder {run}: env {cfg.env._target_} from the command line")
    return cfg


def cmd_collect(args: list[str]) -> int:
    known = ("policy", "episodes", "seed", "guidance", "store", "task")
    positional, opts, _, overrides = split_args(args, known, True)
    if len(positional) != 1:
        raise RecapUsageError(f"recap collect takes one path\n{USAGE}")
    run = Path(positional[0])
    if not (run / "config.yaml").exists() and not opts.get("policy"):
        raise RecapUsageError(f"recap collect: {run} is no run folder; a new one needs policy=<file.pt | VLA folder>")
    from robo_rl.config import make_env
    from robo_rl.offline.recap_vla import fine_tuned_vla, is_vla

    policy = Path(opts["policy"]) if opts.get("policy") else None
    if policy is not None and not (policy.exists() or is_vla(policy)):  # before a new run folder is made
        raise RecapUsageError(f"recap collect: policy {policy} does not exist (a .pt file or a VLA folder)")
    cfg = run_config(run, overrides, "collect")
    if policy is None:
        own = (run / "recap" / "policy.pt", fine_tuned_vla(run / "recap"), run / "bc" / "policy.pt")
        policy = next((p for p in own if p.exists()), None)
    if policy is None or not (policy.exists() or is_vla(policy)):
        raise RecapUsageError(
            f"recap collect: no policy (policy=<file.pt | VLA folder>; none in {run}/recap or {run}/bc)"
        )
    try:
        episodes, seed = int(opts.get("episodes", 50)), int(opts.get("seed", 100000))
        guidance = float(opts["guidance"]) if "guidance" in opts else None
    except ValueError:
        raise RecapUsageError("recap collect: episodes and seed are integers, guidance a number") from None
    if episodes < 1 or seed < 0 or (guidance is not None and guidance < 0):
        raise RecapUsageError("recap collect: episodes ≥ 1, seed ≥ 0 and guidance ≥ 0")
    import torch

    from robo_rl.offline.recap_collect import collect, load_acting_base

    torch.set_num_threads(int(cfg.torch_threads))
    env = make_env(cfg)
    try:
        base = load_acting_base(policy, env, guidance, opts.get("task"))
        store = opts.get("store", "true").lower() == "true"
        s = collect(env, base, episodes, seed, run if store else None, progress=bool(cfg.logger.progress))
    finally:
        env.close()
    low, high = s["success_ci95"]
    print(
        f"{policy} (guidance {base.model.guidance}): success {s['successes']}/{s['episodes']} = "
        f"{s['success_rate']:.2f} (Wilson 95% CI [{low:.2f}, {high:.2f}]), mean length {s['mean_length']:.1f}"
    )
    if s["store"]:
        print(f"episodes: {s['store']} (source {s['source']})")
    return 0


def cmd_tune(args: list[str]) -> int:
    positional, opts, _, overrides = split_args(args, ("policy", "guidances", "episodes", "seed", "task"), True)
    run = one_path(positional, "tune")
    from robo_rl.offline.recap_vla import fine_tuned_vla

    own = (run / "recap" / "policy.pt", fine_tuned_vla(run / "recap"))
    policy = Path(opts["policy"]) if opts.get("policy") else next((p for p in own if p.exists()), own[0])
    if not policy.exists():
        raise RecapUsageError(f"recap tune: {policy} does not exist (run recap finetune first, or policy=<file.pt>)")
    try:
        guidances = [float(w) for w in opts.get("guidances", GUIDANCES).split(",")]
        episodes, seed = int(opts.get("episodes", TUNE_EPISODES)), int(opts.get("seed", 300000))
    except ValueError:
        raise RecapUsageError("recap tune: guidances are numbers (1,2,4), episodes and seed integers") from None
    if not guidances or min(guidances) < 0 or len(set(guidances)) != len(guidances) or episodes < 1 or seed < 0:
        raise RecapUsageError("recap tune: distinct guidances ≥ 0, episodes ≥ 1 and seed ≥ 0")
    import torch

    from robo_rl.config import load_saved_config, make_env
    from robo_rl.offline.recap_tune import tune_guidance

    cfg = load_saved_config(run / "config.yaml", overrides)
    torch.set_num_threads(int(cfg.torch_threads))
    env = make_env(cfg)
    try:
        progress = bool(cfg.logger.progress)
        best, results = tune_guidance(env, policy, guidances, episodes, seed, progress, opts.get("task"))
    finally:
        env.close()
    for w, r in results.items():
        low, high = r["success_ci95"]
        print(f"guidance {w:g}: success {r['successes']}/{r['episodes']} (Wilson 95% CI [{low:.2f}, {high:.2f}])")
    print(f"{policy}: guidance {best:g} from now on (seeds {seed}-{seed + episodes - 1}, not stored)")
    return 0
