"""Layouts: what `robo-rl launch <layout>` starts — a learner, N actors, the GUI, a critic server — read from
launch/layouts/<name>.yaml (the format: launch/layouts/README.md), checked, its counted actors expanded. Starting and
watching the processes is launch/launcher/'s job."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from robo_rl.errors import UserError

LAYOUTS_DIR = Path(__file__).parent / "layouts"
ROLES = ("learner", "actor", "gui", "critic")
RESTART_POLICIES = ("on-failure", "never")
LAYOUT_KEYS = (
    "overrides",
    "processes",
    "max_restarts",
    "restart_backoff_s",
    "stop_timeout_s",
    "remote_dir",
    "remote_python",
    "address",
    "ray_address",
)
PROCESS_KEYS = ("name", "role", "overrides", "host", "restart", "count", "ray")
OPTION_PREFIX = "launch."  # robo-rl launch <layout> launch.max_restarts=3 launch.actors=8: the layout's own settings


class LayoutError(UserError, ValueError):
    """A layout (or launch) problem a user can fix, one line (a robo_rl UserError)."""


@dataclass(frozen=True)
class Process:
    name: str
    role: str
    overrides: tuple[str, ...] = ()
    host: str | None = None  # user@machine: started over SSH
    restart: str = "on-failure"
    actor_index: int | None = None  # its place among the layout's actors (its seed)
    ray: dict = field(default_factory=dict)  # Ray placement: num_cpus, num_gpus, resources


@dataclass
class Layout:
    name: str
    processes: list[Process]
    overrides: list[str] = field(default_factory=list)
    max_restarts: int = 5
    restart_backoff_s: float = 1.0
    stop_timeout_s: float = 30.0  # after SIGINT (the learner writes its checkpoint), before SIGTERM
    remote_dir: str | None = None  # the robo_rl checkout on the other machines
    remote_python: str = ".venv/bin/python"
    address: str | None = None  # this machine's address as the other machines reach it (guessed when null)
    ray_address: str | None = None  # null: a running cluster if there is one, else a local one

    @property
    def learner(self) -> Process:
        return next(p for p in self.processes if p.role == "learner")

    def of_role(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role]

    @property
    def distributed(self) -> bool:
        return any(p.host for p in self.processes)


def layout_names() -> dict[str, str]:
    """Each layout shipped in launch/layouts/ with its first comment line."""
    out = {}
    for path in sorted(LAYOUTS_DIR.glob("*.yaml")):
        first = path.read_text().splitlines()[:1]
        out[path.stem] = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
    return out


def split_options(args: list[str]) -> tuple[dict, list[str]]:
    """`launch.<setting>=<value>` (the layout's settings) apart from the processes' config overrides."""
    options, overrides = {}, []
    for arg in args:
        if arg.startswith(OPTION_PREFIX):
            key, eq, value = arg[len(OPTION_PREFIX) :].partition("=")
            if not eq:
                raise LayoutError(f"{arg}: a launch option needs a value ({OPTION_PREFIX}<setting>=<value>)")
            options[key] = yaml.safe_load(value)
        else:
            overrides.append(arg)
    return options, overrides


def load_layout(name_or_path: str, options: dict | None = None) -> Layout:
    """A layout by name (launch/layouts/<name>.yaml) or path, its actors expanded (`count`), checked."""
    path = Path(name_or_path)
    if not path.is_file():
        path = LAYOUTS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        names = list(layout_names())
        close = difflib.get_close_matches(name_or_path, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise LayoutError(f"no layout '{name_or_path}': {hint}(one of: {', '.join(names)}, or a .yaml path)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise LayoutError(f"layout {path} is not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise LayoutError(f"layout {path}: expected a mapping with processes:")
    options = dict(options or {})
    actors = options.pop("actors", None)
    unknown = [k for k in options if k not in LAYOUT_KEYS or k in ("processes", "overrides")]
    if unknown:
        raise LayoutError(
            f"unknown launch option {OPTION_PREFIX}{unknown[0]}{_did_you_mean(unknown[0], LAYOUT_KEYS)}"
            f" (or {OPTION_PREFIX}actors=N)"
        )
    data.update(options)
    return parse_layout(data, path.stem, actors)


def parse_layout(data: dict, name: str, actors: int | None = None) -> Layout:
    """A layout from its YAML mapping; `actors` sets the count of its one counted actor entry."""
    where = f"layout {name}"
    for key in data:
        if key not in LAYOUT_KEYS:
            raise LayoutError(f"{where}: unknown key '{key}'{_did_you_mean(key, LAYOUT_KEYS)}")
    entries = data.get("processes")
    if not isinstance(entries, list) or not entries:
        raise LayoutError(f"{where}: needs processes: [{{name, role}}, ...]")
    counted = [e for e in entries if isinstance(e, dict) and "count" in e]
    if actors is not None:
        if len(counted) != 1 or counted[0].get("role") != "actor":
            raise LayoutError(f"{where}: {OPTION_PREFIX}actors needs exactly one actor entry with count:")
        entries = [{**e, "count": actors} if e is counted[0] else e for e in entries]
    processes: list[Process] = []
    for entry in entries:
        processes += _expand(entry, where, sum(p.role == "actor" for p in processes))
    names = [p.name for p in processes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise LayoutError(f"{where}: process name '{dupes[0]}' is used twice (names are actor ids and log names)")
    learners = [p for p in processes if p.role == "learner"]
    if len(learners) != 1:
        raise LayoutError(f"{where}: needs exactly one learner (has {len(learners)})")
    layout = Layout(name, processes, overrides=_string_list(data.get("overrides"), f"{where}: overrides"))
    for key, kind in (("max_restarts", int), ("restart_backoff_s", float), ("stop_timeout_s", float)):
        if data.get(key) is not None:
            if not isinstance(data[key], int | float) or isinstance(data[key], bool) or data[key] < 0:
                raise LayoutError(f"{where}: {key} must be a number >= 0 (got {data[key]!r})")
            setattr(layout, key, kind(data[key]))
    for key in ("remote_dir", "remote_python", "address", "ray_address"):
        if data.get(key) is not None:
            setattr(layout, key, str(data[key]))
    if layout.distributed and not layout.remote_dir:
        raise LayoutError(f"{where}: processes on other machines need remote_dir: (the robo_rl checkout there)")
    return layout


def _expand(entry, where: str, actors_before: int) -> list[Process]:
    if not isinstance(entry, dict):
        raise LayoutError(f"{where}: each process is a mapping {{name, role, ...}} (got {entry!r})")
    for key in entry:
        if key not in PROCESS_KEYS:
            raise LayoutError(f"{where}: unknown process key '{key}'{_did_you_mean(key, PROCESS_KEYS)}")
    name, role = entry.get("name"), entry.get("role")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise LayoutError(f"{where}: process name {name!r} must be letters, digits, '_', '-', '.' (it names its log)")
    if role not in ROLES:
        raise LayoutError(
            f"{where}: {name}: role '{role}' is not one of {', '.join(ROLES)}{_did_you_mean(str(role), ROLES)}"
        )
    restart = entry.get("restart", "never" if role == "learner" else "on-failure")
    if role == "learner" and restart != "never":
        raise LayoutError(f"{where}: {name}: a learner is never restarted: its crash ends the launch (resume= goes on)")
    if restart not in RESTART_POLICIES:
        raise LayoutError(f"{where}: {name}: restart '{restart}' is not one of {', '.join(RESTART_POLICIES)}")
    count = entry.get("count")
    if count is not None and (role != "actor" or not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise LayoutError(f"{where}: {name}: count is for actors, a whole number >= 1 (got {count!r})")
    if entry.get("host") is not None and not isinstance(entry["host"], str):
        raise LayoutError(f"{where}: {name}: host is user@machine (got {entry['host']!r})")
    ray = entry.get("ray") or {}
    if not isinstance(ray, dict):
        raise LayoutError(f"{where}: {name}: ray is a mapping (num_cpus, num_gpus, resources)")
    base = Process(
        name,
        role,
        tuple(_string_list(entry.get("overrides"), f"{where}: {name}: overrides")),
        entry.get("host"),
        restart,
        ray=ray,
    )
    if count is None:
        return [Process(**{**base.__dict__, "actor_index": actors_before if role == "actor" else None})]
    return [Process(**{**base.__dict__, "name": f"{name}-{i}", "actor_index": actors_before + i}) for i in range(count)]


def _string_list(value, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
        raise LayoutError(f"{where} must be a list of key=value strings (got {value!r})")
    return list(value)


def _did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def override_key(override: str) -> str:
    key, _, value = override.partition("=")
    key = key.lstrip("+~")
    return "gui.enabled" if key == "gui" and value.lower() in ("true", "false") else key  # `gui=true` shorthand


def merge_overrides(*lists) -> list[str]:
    """Overrides in order, a later one for the same key replacing an earlier one (hydra refuses a key twice)."""
    merged: dict[str, str] = {}
    for overrides in lists:
        for o in overrides:
            merged.pop(override_key(o), None)
            merged[override_key(o)] = o
    return list(merged.values())
