"""A slot: one process of the layout over the whole launch (its restarts included), in start order."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from launch.launcher.command_lines import Network, process_args
from launch.launcher.prepare import Prepared
from launch.layout import Process

START_ORDER = ("critic", "gui", "learner", "actor")  # servers first: actors find them up (they would reconnect anyway)


@dataclass
class Slot:
    """One process of the layout over the launch: its current OS process and what happened to it."""

    proc: Process
    args: list[str]
    log: Path
    handle: object | None = None
    state: str = "waiting"  # waiting | running | restarting | stopping | exited | crashed
    code: int | None = None
    restarts: int = 0
    restart_at: float = 0.0
    stopping: bool = False
    pids: list[int] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.handle is not None and self.code is None

    def label(self, now: float) -> str:
        if self.state == "restarting":
            return f"restarting in {max(0.0, self.restart_at - now):.0f}s"
        if self.state in ("exited", "crashed"):
            return f"{self.state}({self.code})"
        return self.state


def make_slots(prep: Prepared, ports: dict, net: Network) -> list[Slot]:
    order = {role: i for i, role in enumerate(START_ORDER)}
    procs = sorted(prep.layout.processes, key=lambda p: order[p.role])
    slots = [
        Slot(
            p,
            process_args(prep.layout, p, prep.overrides, ports, net, prep.run_dir, prep.base_seed),
            prep.run_dir / "logs" / f"{p.name}.log",
        )
        for p in procs
    ]
    record = {
        "layout": prep.layout.name,
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "ports": ports,
        "processes": {s.proc.name: {"role": s.proc.role, "host": s.proc.host, "args": s.args} for s in slots},
    }
    (prep.run_dir / "launch.json").write_text(json.dumps(record, indent=1))  # what ran, to repeat it by hand
    return slots
