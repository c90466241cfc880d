"""A recording stand-in for an SDK module: it passes every use through to the module it wraps (a fake SDK) and keeps
a list of what was used: each class constructed, method called (with its arguments and result), attribute or
property read (with its value), and module name looked up. What a driver really does to its SDK, ready to be checked
against the real one."""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass, field


@dataclass
class Use:
    owner: str  # the class (or module) used: "Robot", "rtde_receive"
    member: str  # "__init__" for a construction, else the method, property or attribute name
    kind: str  # "call" or "get"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    result: object = None
    returned: bool = True  # False for a call that raised


class Recording:
    """Wraps fake SDK modules; `uses` is what went through them, oldest first."""

    def __init__(self) -> None:
        self.uses: list[Use] = []
        self._fake_modules: set[str] = set()

    def module(self, module) -> _ModuleProxy:
        self._fake_modules.add(module.__name__)
        self._fake_modules.update(v.__module__ for v in vars(module).values() if isinstance(v, type))
        return _ModuleProxy(module, self)

    def _is_fake_class(self, value) -> bool:
        return isinstance(value, type) and value.__module__ in self._fake_modules

    def wrap(self, value):
        if self._is_fake_class(value):
            if issubclass(value, BaseException):  # the driver's `except sdk.ControlException` needs the class
                return value
            return _ClassProxy(value, self)
        if self._is_fake_class(type(value)) and not isinstance(value, enum.Enum | BaseException):
            return _InstanceProxy(value, self)
        return value

    def uses_of(self, owner: str, member: str) -> list[Use]:
        return [u for u in self.uses if u.owner == owner and u.member == member]


def _unwrap(value):
    return object.__getattribute__(value, "_target") if isinstance(value, _InstanceProxy) else value


class _ModuleProxy:
    def __init__(self, module, recording: Recording) -> None:
        self._target, self._recording = module, recording

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        self._recording.uses.append(Use(self._target.__name__, name, "get", result=value))
        return self._recording.wrap(value)


class _ClassProxy:
    def __init__(self, cls: type, recording: Recording) -> None:
        self._target, self._recording = cls, recording

    def __call__(self, *args, **kwargs):
        args, kwargs = tuple(map(_unwrap, args)), {k: _unwrap(v) for k, v in kwargs.items()}
        obj = self._target(*args, **kwargs)
        self._recording.uses.append(Use(self._target.__name__, "__init__", "call", args, kwargs, obj))
        return self._recording.wrap(obj)

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        self._recording.uses.append(Use(self._target.__name__, name, "get", result=value))
        return self._recording.wrap(value)


class _InstanceProxy:
    def __init__(self, obj, recording: Recording) -> None:
        object.__setattr__(self, "_target", obj)
        object.__setattr__(self, "_recording", recording)

    def __getattribute__(self, name: str):
        obj, recording = object.__getattribute__(self, "_target"), object.__getattribute__(self, "_recording")
        owner = type(obj).__name__
        if inspect.isfunction(inspect.getattr_static(type(obj), name, None)):
            method = getattr(obj, name)

            def call(*args, **kwargs):
                args, kwargs = tuple(map(_unwrap, args)), {k: _unwrap(v) for k, v in kwargs.items()}
                use = Use(owner, name, "call", args, kwargs, returned=False)
                recording.uses.append(use)  # before the call: one that raises was still made
                use.result = method(*args, **kwargs)
                use.returned = True
                return recording.wrap(use.result)

            return call
        value = getattr(obj, name)
        recording.uses.append(Use(owner, name, "get", result=value))
        return recording.wrap(value)
