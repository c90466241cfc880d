"""The signatures of a pybind11 module's functions, read from their docstrings (`inspect.signature` cannot read a
compiled function's), and whether a Python value fits one of their type annotations.

pybind11 writes each overload as its docstring's first line (or numbered lines after `name(*args, **kwargs)`):
`name(self: Cls, a: float, b: list[float] = [], arg0: int) -> bool`. A parameter named `argN` was declared without a
name: it can be passed by position only.
"""

from __future__ import annotations

import enum
import inspect
import numbers
import re
from dataclasses import dataclass

import numpy as np

NO_DEFAULT = inspect.Parameter.empty


@dataclass
class Overload:
    signature: inspect.Signature  # without `self`; each default is the docstring's text of it
    returns: str  # the return annotation's text


def _split_top_level(text: str, sep: str) -> list[str]:
    """`text` split at each `sep` outside brackets and quotes."""
    parts, depth, quote, start, i = [], 0, None, 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "([{<":
            depth += 1
        elif c in ")]}>" and not (c == ">" and text[i - 1] == "-"):
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i].strip())
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _overload_lines(name: str, doc: str) -> list[str]:
    line = re.compile(rf"^(?:\d+\. )?{re.escape(name)}\((.*)\) -> (.+)$")
    return [m.group(0) for m in map(line.match, doc.splitlines()) if m and m.group(1) != "*args, **kwargs"]


def _parse(name: str, line: str) -> Overload:
    head, returns = line.rsplit(" -> ", 1)
    inner = head[head.index(f"{name}(") + len(name) + 1 : -1]
    params = []
    for i, text in enumerate(_split_top_level(inner, ",")):
        pname, _, rest = text.partition(":")
        annotation, _, default = rest.partition(" = ")
        pname = pname.strip()
        if i == 0 and pname in ("self", "arg0") and "." in annotation:  # the bound instance
            continue
        unnamed = re.fullmatch(r"arg\d+", pname)
        kind = inspect.Parameter.POSITIONAL_ONLY if unnamed else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(
            inspect.Parameter(pname, kind, default=default.strip() or NO_DEFAULT, annotation=annotation.strip())
        )
    if any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params):  # a positional-only one makes all so
        params = [p.replace(kind=inspect.Parameter.POSITIONAL_ONLY) for p in params]
    return Overload(inspect.Signature(params), returns.strip())


def overloads(func, name: str) -> list[Overload]:
    """Every signature of a pybind11 function (or property getter, named `name`), read from its docstring."""
    doc = getattr(func, "__doc__", None) or ""
    lines = _overload_lines(name, doc)
    if not lines and isinstance(func, property):  # a getter's doc: "(arg0: Cls) -> T"
        lines = [f"{name}{first}" for first in (func.fget.__doc__ or "").splitlines()[:1] if first.startswith("(")]
    if not lines:
        raise LookupError(f"{name}: no signature in its docstring: {doc[:200]!r}")
    return [_parse(name, line) for line in lines]


def _class_named(module, dotted: str):
    return getattr(module, dotted.rsplit(".", 1)[-1], None)


def _real_class_of(value, module):
    """The real SDK class a fake's value stands for: the first class in its MRO whose name the real module has."""
    for cls in type(value).__mro__:
        if cls is not object and isinstance(getattr(module, cls.__name__, None), type):
            return getattr(module, cls.__name__)
    return None


def fits(annotation: str, value, module) -> bool:
    """Whether `value` is what a pybind11 parameter or return annotated `annotation` takes or gives."""
    alternatives = _split_top_level(annotation, "|")
    if len(alternatives) > 1:
        return any(fits(a, value, module) for a in alternatives)
    a = annotation
    if a == "None":
        return value is None
    if a == "bool":
        return isinstance(value, bool | np.bool_)
    if a == "int" or a == "typing.SupportsIndex":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if a in ("float", "typing.SupportsFloat"):
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if a == "str":
        return isinstance(value, str)
    if m := re.fullmatch(r"list\[(.+)\]", a):
        return isinstance(value, list | tuple) and all(fits(m.group(1), v, module) for v in value)
    if a.startswith("typing.Annotated[numpy.typing"):  # an Eigen vector: "[7, 1]" is its size
        size = re.search(r'"\[(\d+), 1\]"', a)
        array = np.asarray(value)
        return array.dtype.kind in "fiu" and (size is None or array.size == int(size.group(1)))
    real = _class_named(module, a)
    if not isinstance(real, type):
        raise LookupError(f"no rule for the annotation {a!r}")
    stand_in = _real_class_of(value, module)
    if stand_in is not None:  # a fake's object: its real counterpart must be (a subclass of) the annotated class
        return issubclass(stand_in, real) and (not isinstance(value, enum.Enum) or hasattr(real, value.name))
    try:  # pybind11's implicit conversions (a float to a RelativeDynamicsFactor, an array to a JointState)
        real(value)
    except (TypeError, ValueError):
        return False
    return True


def bind(overload: Overload, args: tuple, kwargs: dict, module) -> str | None:
    """None when the overload takes these arguments (by name, position and annotated type), else why not."""
    try:
        bound = overload.signature.bind(*args, **kwargs)
    except TypeError as e:
        return f"{overload.signature}: {e}"
    for name, value in bound.arguments.items():
        annotation = overload.signature.parameters[name].annotation
        if not fits(annotation, value, module):
            return f"{overload.signature}: {name}={value!r} is not {annotation}"
    return None
