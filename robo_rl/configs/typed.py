"""A component's typed config: each dataclass field carries its default, its range and its one-line meaning.

    clip: float = setting(0.01, "the ratio clip", above=0, below=1)

The field's annotation gives the kind (int, float, bool, str, a tuple for a list) and whether null is allowed
(`X | None`); `setting` gives the rest. From the fields come the range table's entries (`robo_rl/configs/settings.py`),
`--help`, the check of a composed config block (`check_block`) and the builder's instance (`config_from`), which
refuses a key the dataclass does not have by name. No torch here: the CLI reads this before any model exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

INF = math.inf
LABEL_KEYS = ("_target_", "name")  # a block's plugin and its label: not settings, never passed on as one
FIXED = None  # the `_target_` key under which a block without one (`train`, `replay`) names its dataclass


@dataclass(frozen=True)
class Setting:
    kind: str  # int | float | bool | str | choice; "int list" / "float list": every element in range
    meaning: str
    low: float = -INF
    high: float = INF
    low_open: bool = False  # the range excludes `low` (a positive duration, a learning rate)
    nullable: bool = False
    choices: tuple = ()
    length: int | None = None  # lists: exactly this many elements
    or_mapping: bool = False  # lists: a mapping keyed by such values is allowed too (a robot's camera specs)
    high_open: bool = False  # the range excludes `high` (a ratio clip below 1)

    def allowed(self) -> str:
        kind = self.kind.split()[0]
        if kind == "choice":
            text = " | ".join(str(c) for c in self.choices)
        elif kind in ("bool", "str"):
            text = {"bool": "true | false", "str": "text"}[kind]
        else:
            low = "-inf" if self.low == -INF else _num(self.low)
            high = "inf" if self.high == INF else _num(self.high)
            opens = "(" if self.low_open or self.low == -INF else "["
            closes = ")" if self.high_open or self.high == INF else "]"
            text = f"{'an integer' if kind == 'int' else 'a number'} in {opens}{low}, {high}{closes}"
        if self.kind.endswith("list"):
            text = f"a list of {'' if self.length is None else f'{self.length} '}values, each {text}"
        return text + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` (None: fine)."""
        if value is None and self.nullable:
            return None
        if self.kind.endswith("list"):
            if self.or_mapping and isinstance(value, dict):
                value = list(value)
            if not isinstance(value, (list, tuple)) or (self.length is not None and len(value) != self.length):
                return f"must be {self.allowed()}"
            kind = self.kind.split()[0]
            return next((f"must be {self.allowed()}" for v in value if self._bad_scalar(kind, v)), None)
        return f"must be {self.allowed()}" if self._bad_scalar(self.kind, value) else None

    def _bad_scalar(self, kind: str, v: Any) -> bool:
        if kind == "bool":
            return not isinstance(v, bool)
        if kind == "str":
            return not isinstance(v, str)
        if kind == "choice":
            return v not in self.choices
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind == "int" and not isinstance(v, int)):
            return True
        if math.isnan(v):
            return True
        return not (self.low < v if self.low_open else self.low <= v) or not (
            v < self.high if self.high_open else v <= self.high
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def setting(
    default: Any,
    meaning: str,
    *,
    low: float = -INF,
    high: float = INF,
    above: float | None = None,
    below: float | None = None,
    choices: tuple = (),
    length: int | None = None,
) -> Any:
    """A dataclass field with its default, range and meaning. `low`/`high` bound it inclusively, `above`/`below`
    exclusively; a list's bounds apply to each element."""
    rng = {"low": low, "high": high, "low_open": above is not None, "high_open": below is not None}
    if above is not None:
        rng["low"] = above
    if below is not None:
        rng["high"] = below
    return dataclasses.field(
        default=default, metadata={"setting": {"meaning": meaning, "choices": tuple(choices), "length": length, **rng}}
    )


def settings_of(cls: type) -> dict[str, Setting]:
    """Each field's `Setting`, its kind and nullability read from the annotation (a dict of the caller's own)."""
    return dict(_settings_of(cls))


@functools.cache  # the annotations are evaluated once per class, not at each check of each config (~16 a check)
def _settings_of(cls: type) -> dict[str, Setting]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("setting")
        if meta is None:
            continue
        kind, nullable, length = _kind(hints[f.name])
        if meta["choices"]:
            kind = "choice"
        out[f.name] = Setting(kind, nullable=nullable, **{**meta, "length": meta["length"] or length})
    return out


def _kind(hint) -> tuple[str, bool, int | None]:
    """(kind, nullable, list length) of an annotation such as `float | None` or `tuple[int, ...]`."""
    args = typing.get_args(hint)
    nullable = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    if nullable:
        (hint,) = [a for a in args if a is not type(None)]
        args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        element = args[0]
        length = None if len(args) == 2 and args[1] is Ellipsis else len(args)
        return f"{element.__name__} list", nullable, length
    return hint.__name__, nullable, None


def defaults_of(cls: type) -> dict[str, Any]:
    """The fields' defaults as a config holds them (lists, not tuples)."""
    return {f.name: list(f.default) if isinstance(f.default, tuple) else f.default for f in dataclasses.fields(cls)}


def unknown_keys_problem(prefix: str, cls: type, keys) -> str | None:
    """A one-line refusal of the first key `cls` has no field for, with the closest one (None: all known)."""
    fields = [f.name for f in dataclasses.fields(cls)]
    blocks = getattr(cls, "blocks", ())  # keys holding a sub-block (checked as a block of its own) or plugin specs
    for key in keys:
        if key not in fields and key not in LABEL_KEYS and key not in blocks:
            dotted = [f"{prefix}.{f}" for f in fields]  # whole keys, as hydra's own suggestions compare them
            close = difflib.get_close_matches(f"{prefix}.{key}", dotted, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            return f"unknown config key '{prefix}.{key}'{hint} ({cls.__name__} has no such setting; see robo-rl show)"
    return None


def block_problem(prefix: str, cls: type, block: dict) -> str | None:
    """The first unknown key or value out of range in a config block meant for `cls`, as one line (None: fine)."""
    text = unknown_keys_problem(prefix, cls, block)
    if text:
        return text
    for key, s in settings_of(cls).items():
        if key in block and (text := s.problem(block[key])):
            return f"{prefix}.{key}={show(block[key])} is not allowed: {text} ({s.meaning})"
    return None


def config_from(cls: type, keys: dict, prefix: str):
    """`cls` built from a config block's keys (lists become tuples), every key known and in range, else ValueError."""
    block = {k: v for k, v in keys.items() if k not in LABEL_KEYS and k not in getattr(cls, "blocks", ())}
    text = block_problem(prefix, cls, block)
    if text:
        raise ValueError(text)
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in block.items()})


def show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    return str(value)
