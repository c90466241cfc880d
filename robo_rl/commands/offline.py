"""`robo-rl bc` and `robo-rl distill`: the offline commands (behaviour cloning, one-step distillation)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from robo_rl.commands.common import UsageError, run_dir_for


def offline_run_dir(cfg, overrides: list[str], verb: str) -> tuple[Path, bool]:
    """The run folder of a `bc` or `distill` run, named after the verb and the task (`bc_pick_cube_lift`) unless
    `name=` is given, and whether this command made it (a failure then removes it)."""
    from robo_rl.runs import task_label

    if not any(o.split("=", 1)[0].lstrip("+") == "name" for o in overrides):
        cfg.name = f"{verb}_{task_label(cfg.env)}"  # the default experiment's name says nothing about this run
    return run_dir_for(cfg), not cfg.run_dir and not cfg.resume


@contextlib.contextmanager
def removed_on_failure(run_dir: Path, fresh: bool, product: str):
    """On a failure (or Ctrl-C) inside, remove the run folder this command made if it holds no `product` yet."""
    from robo_rl.runs import discard_unfinished_run

    try:
        yield
    except BaseException:
        if fresh and discard_unfinished_run(run_dir, product):
            print(f"removed the run folder {run_dir}: the run failed before writing {product}")
        raise


def cmd_bc(overrides: list[str]) -> int:
    """Behaviour-clone a base policy: demonstrations first (a bad dataset stops before a run folder exists)."""
    from robo_rl.config import load_config

    cfg = load_config(overrides)  # a bad setting is refused before torch is imported
    from robo_rl.offline.bc import load_bc_data, train_bc

    data = load_bc_data(cfg, progress=cfg.logger.progress)
    run_dir, fresh = offline_run_dir(cfg, overrides, "bc")
    print(
        f"run folder: {run_dir}\ndemonstrations: {data.episodes} episodes ({data.val_episodes} held out) "
        f"from {data.source}"
    )
    with removed_on_failure(run_dir, fresh, "bc/policy.pt"):
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
    from robo_rl.offline.distill import check_teacher, distill

    check_teacher(Path(cfg.checkpoint))  # an MLP, an unreadable file or a non-DSRL run: refused before a run folder
    run_dir, fresh = offline_run_dir(cfg, overrides, "distill")
    print(f"run folder: {run_dir}")
    with removed_on_failure(run_dir, fresh, "distill/policy.pt"):
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
    print(
        f"checkpoint: {s['checkpoint']} (a flow policy: experiment=rlpd policy=flow policy.path=..., "
        "or a DSRL/residual base)"
    )
    return 0
