"""`make_camera`: a camera from its config spec, `{_target_: <a Camera class path>, **options}`, found the way every
plugin is (hydra `_target_`). A spec whose class cannot be imported, is not a camera, or lacks an option is refused
naming the camera and, for a bad option, the class's options."""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from hardware.cameras.base import Camera
from robo_rl.errors import UserError

# named in errors, so a user sees what to write; any Camera subclass elsewhere plugs in the same way
CAMERA_CLASSES = (
    "hardware.cameras.OpenCVCamera",
    "hardware.cameras.RealSenseCamera",
    "hardware.cameras.FakeCamera",
    "hardware.twin_camera.TwinCamera",
)


class CameraSpecError(UserError, ValueError):
    """A camera spec without a usable `_target_`, or with options its class does not take; the text names the
    camera."""


def _choices(target: str) -> str:
    close = difflib.get_close_matches(target, CAMERA_CLASSES, n=1, cutoff=0.9)  # a misspelling, not a guess
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"the camera classes: {', '.join(CAMERA_CLASSES)}{hint}"


def camera_class(target: str, name: str) -> type[Camera]:
    """The Camera subclass a spec's `_target_` names; CameraSpecError naming camera `name` when there is none."""
    module_name, _, class_name = target.rpartition(".")
    if not module_name:
        raise CameraSpecError(
            f"camera '{name}': _target_ {target!r} is not a class path (package.module.Class); {_choices(target)}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CameraSpecError(
            f"camera '{name}': _target_ {target}: cannot import {module_name} ({exc}); {_choices(target)}"
        ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise CameraSpecError(
            f"camera '{name}': _target_ {target}: {module_name} has no {class_name}; {_choices(target)}"
        )
    if not (isinstance(cls, type) and issubclass(cls, Camera)):
        raise CameraSpecError(
            f"camera '{name}': _target_ {target} is not a Camera subclass (hardware.cameras.Camera); {_choices(target)}"
        )
    return cls


def camera_options(cls: type[Camera]) -> list[str]:
    """The options a spec may give a camera class: its keyword arguments, its own and those it passes on to its bases
    through **kw, less the ones its env supplies (`host_options`)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return sorted(names - set(cls.host_options))


def make_camera(spec: Mapping[str, Any] | Camera, name: str | None = None, **host: Any) -> Camera:
    """A camera (not started) from `{"_target_": "package.module.Class", **options}`. `name` (the camera's key in the
    env's config) fills in the spec's name; `host` holds what some classes take from their env rather than the config
    (`twin`: the arm's twin, for a `TwinCamera`), passed only to a class that lists it in `host_options`."""
    if isinstance(spec, Camera):
        return spec
    options = dict(spec)
    if name is not None:
        if options.get("name", name) != name:
            raise CameraSpecError(f"camera spec named '{options['name']}' is given as '{name}'")
        options["name"] = name
    if "name" not in options:
        raise CameraSpecError(f"camera spec without a name: {dict(spec)!r}")
    name = options["name"]
    target = options.pop("_target_", None)
    if target is None:
        old = f" (`type: {options['type']}` is no longer read)" if "type" in options else ""
        raise CameraSpecError(f"camera '{name}' has no _target_{old}: give its class; {_choices('')}")
    cls = camera_class(str(target), name)
    accepted = camera_options(cls)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise CameraSpecError(
            f"camera '{name}': {cls.__name__} has no option {', '.join(unknown)}; "
            f"its options are: {', '.join(accepted)}"
        )
    options.update({key: host.get(key) for key in cls.host_options})
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as exc:  # a required option missing
        raise CameraSpecError(
            f"camera '{name}': {cls.__name__}: {exc}; its options are: {', '.join(accepted)}"
        ) from None
    return cls(**options)
