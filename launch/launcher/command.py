"""`robo-rl launch <layout>`: the usage line, then the layout run locally (launch/launcher/local.py) or, with
`launch.ray=true`, on a Ray cluster (launch/ray_launcher.py)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from launch.launcher.local import launch_local
from launch.launcher.ports import choose_ports
from launch.launcher.prepare import prepare
from launch.launcher.supervisor import EXIT_STOPPED
from launch.layout import OPTION_PREFIX, layout_names, load_layout, split_options

# found by name, only for launch.ray=true: Ray is an optional extra, and that launcher is built on this package
RAY_PLACEMENT = "launch.ray_launcher"


def cmd_launch(args: list[str], out=None) -> int:
    """robo-rl launch <layout or path.yaml> [launch.<setting>=<value> ...] [overrides ...]"""
    out = out or sys.stdout
    if not args or args[0].startswith(("-", OPTION_PREFIX)) or "=" in args[0]:
        names = layout_names()
        width = max(len(n) for n in names)
        print(
            "usage: robo-rl launch <layout or path.yaml> [launch.<setting>=<value> ...] [overrides ...]\n\nlayouts:\n"
            + "\n".join(f"  {n:<{width}}  {text}" for n, text in names.items()),
            file=out,
        )
        return 2
    options, overrides = split_options(args[1:])
    on_ray = bool(options.pop("ray", False))
    layout = load_layout(args[0], options)
    if on_ray:
        code = importlib.import_module(RAY_PLACEMENT).launch_on_ray(layout, overrides, out)
    else:
        ports = choose_ports(layout, overrides, "0.0.0.0" if layout.distributed else "127.0.0.1")
        prep = prepare(layout, overrides, ports)
        print(f"run folder: {prep.run_dir} (logs in {prep.run_dir / 'logs'}); Ctrl-C stops every process", file=out)
        code = launch_local(prep, ports, out)
        summary = evaluation_summary(prep.run_dir) if code == 0 else None
        if summary:
            print(summary, file=out)
    print(f"launch: {'done' if code == 0 else 'stopped' if code == EXIT_STOPPED else 'failed'}", file=out)
    return code


def evaluation_summary(run_dir: Path) -> str | None:
    """The learner's evaluation of the finished run in one line (None when it wrote none)."""
    path = Path(run_dir) / "eval" / "report.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    low, high = r["success_ci95"]
    return (
        f"evaluation: success {r['successes']}/{r['episodes']} = {r['success_rate']:.2f} "
        f"(Wilson 95% CI [{low:.2f}, {high:.2f}]), report {path.with_suffix('.md')}"
    )
