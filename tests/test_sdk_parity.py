"""The fake `franky` and `ur_rtde` (hardware/fake_franky.py, fake_rtde.py) against the real SDKs (the dev group
installs franky-control and ur-rtde): each test skips, saying so, where one is not installed.

Both SDKs are pybind11 modules, whose signatures `inspect.signature` cannot read: they are parsed from the
docstrings pybind11 writes (tests/pybind_signatures.py), and argument and return values are checked against those
annotations. The drivers run on their twins through a recording stand-in of the fake SDK (tests/sdk_recording.py):
every construction, call (its arguments as passed) and attribute read the driver made must exist in the real SDK and
bind to one of its signatures; a static read of the driver's source checks that the run reached every SDK name it
uses. The franky value objects (`JointMotion`, `JointStopMotion`) are also built for real from the driver's arguments.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import types
from pathlib import Path

import numpy as np
import pytest

from hardware import fake_franky, fake_rtde
from hardware.arm import VirtualClock
from hardware.franka import FrankaDriver
from hardware.ur import URDriver
from tests.pybind_signatures import Overload, bind, fits, overloads
from tests.sdk_recording import Recording, Use

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 1.5  # the twin's servos and gripper arrive within it
NOT_INSTALLED = (
    "{module} ({dist}) is not installed: the dev group installs it where PyPI has a wheel for this Python and "
    "platform; without it hardware/{fake}.py cannot be checked against the real SDK"
)
FRANKY_VALUE_CLASSES = ("JointMotion", "JointStopMotion", "JointState")  # built without a robot: built for real


@pytest.fixture(scope="module")
def franky():
    return pytest.importorskip(
        "franky", reason=NOT_INSTALLED.format(module="franky", dist="franky-control", fake="fake_franky")
    )


@pytest.fixture(scope="module")
def rtde():
    names = ("rtde_control", "rtde_receive", "dashboard_client")
    reason = NOT_INSTALLED.format(module="rtde_control", dist="ur-rtde", fake="fake_rtde")
    return types.SimpleNamespace(**{name: pytest.importorskip(name, reason=reason) for name in names})


def _real_owner(owner: str, real_modules: list):
    for module in real_modules:
        if module.__name__ == owner:
            return module, module
        if isinstance(getattr(module, owner, None), type):
            return getattr(module, owner), module
    return None, None


def _check_call(use: Use, func, module) -> str | None:
    found = overloads(func, use.member)
    why = [bind(o, use.args, use.kwargs, module) for o in found]
    taken = [o for o, w in zip(found, why, strict=True) if w is None]
    if not taken:
        return f"{use.owner}.{use.member}{use.args}{use.kwargs}: no real overload takes it: {'; '.join(why)}"
    if use.member != "__init__" and use.returned and not any(fits(o.returns, use.result, module) for o in taken):
        return f"{use.owner}.{use.member} gave {use.result!r}; the real one gives {taken[0].returns}"
    return None


def problems(uses: list[Use], real_modules: list) -> list[str]:
    """What in `uses` the real SDK does not have or would not take."""
    found = []
    for use in uses:
        real, module = _real_owner(use.owner, real_modules)
        if real is None:
            found.append(f"{use.owner}: the real SDK has no such class or module")
            continue
        name = f"{use.owner}.{use.member}"
        member = inspect.getattr_static(real, use.member, None)
        if member is None:
            found.append(f"{name}: the real {real.__name__} has no {use.member}")
        elif real is module:  # a module-level name: a class stays a class, an exception an exception
            fake_is_error = isinstance(use.result, type) and issubclass(use.result, BaseException)
            if isinstance(use.result, type) != isinstance(member, type) or (
                fake_is_error and not issubclass(member, BaseException)
            ):
                found.append(f"{name}: the fake's {use.result!r} is not the kind of thing the real {member!r} is")
        elif use.kind == "call":
            found.append(_check_call(use, member, module))
        elif isinstance(member, property):
            returns = overloads(member, use.member)[0].returns
            if not fits(returns, use.result, module):
                found.append(f"{name}: the fake gives {use.result!r}; the real one gives {returns}")
    return [p for p in found if p]


def sdk_names_in_source(path: Path, receivers: set[str]) -> set[str]:
    """Every attribute the driver's source reads off one of `receivers` (`self._robot`, `state`, ...)."""
    tree = ast.parse(path.read_text())
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and ast.unparse(n.value) in receivers}


def wait(driver, seconds: float) -> None:
    driver.clock.sleep_until(driver.clock.now() + seconds)


def run_the_driver(driver) -> None:
    """Every path a driver takes to its SDK: connect, read, joints, gripper (move and grasp), hold, teach mode,
    a fault and its recovery, close."""
    driver.connect()
    driver.read()
    driver.command_joints(driver.home_joints + 0.05, gripper=0.5)
    wait(driver, SETTLE_S)
    driver.command_joints(driver.home_joints, gripper=1.0)
    driver.hold()
    driver.freedrive(True)
    driver.freedrive(False)
    driver.command_joints(driver.home_joints + 0.05)
    driver.twin.fault = "collision"
    driver.command_joints(driver.home_joints)  # refused by the SDK: the fault is news to the driver
    driver.read()
    driver.command_joints(driver.home_joints)
    wait(driver, SETTLE_S)
    driver.recover()
    assert driver.read().fault is None
    driver.close()


def test_the_franka_driver_uses_only_what_real_franky_has_and_takes(franky):
    driver, recording = FrankaDriver(twin=True, clock=VirtualClock()), Recording()
    driver.franky = recording.module(driver.franky)
    run_the_driver(driver)
    assert problems(recording.uses, [franky]) == []
    receivers = {"self.franky", "self.franky.RobotMode", "self._robot", "self._gripper", "state"}
    unreached = sdk_names_in_source(ROOT / "hardware" / "franka.py", receivers) - {u.member for u in recording.uses}
    assert not unreached, f"the run never used {unreached}: their parity is unchecked"
    for use in recording.uses:  # the value objects, built by the real franky from what the driver passed
        if use.owner in FRANKY_VALUE_CLASSES and use.member == "__init__":
            getattr(franky, use.owner)(*use.args, **use.kwargs)
    assert recording.uses_of("JointMotion", "__init__") and recording.uses_of("Gripper", "grasp_async")


def test_the_ur_driver_uses_only_what_real_ur_rtde_has_and_takes(rtde):
    driver, recording = URDriver(twin=True, clock=VirtualClock()), Recording()
    fakes = driver.sdk
    driver.sdk = types.SimpleNamespace(
        rtde_control=recording.module(fakes.rtde_control),
        rtde_receive=recording.module(fakes.rtde_receive),
        dashboard_client=recording.module(fakes.dashboard_client),
        socket_connect=fakes.socket_connect,  # the Robotiq URCap's socket: not part of ur_rtde
    )
    run_the_driver(driver)
    assert problems(recording.uses, [rtde.rtde_control, rtde.rtde_receive, rtde.dashboard_client]) == []
    receivers = {"self._control", "self._receive", "dashboard"} | {f"self.sdk.{m}" for m in vars(rtde)}
    unreached = sdk_names_in_source(ROOT / "hardware" / "ur.py", receivers) - {u.member for u in recording.uses}
    assert not unreached, f"the run never used {unreached}: their parity is unchecked"
    assert recording.uses_of("DashboardClient", "unlockProtectiveStop") and recording.uses_of(
        "RTDEControlInterface", "servoJ"
    )


def test_the_checker_refuses_a_wrong_name_argument_or_value(franky, rtde):
    """The checks above can fail: each kind of mismatch a fake could hide is named."""
    twin_franky = fake_franky.module_for(FrankaDriver(twin=True, clock=VirtualClock()).twin)
    motion = twin_franky.JointMotion(np.zeros(7))
    wrong = [
        Use("Robot", "move", "call", (motion,), {"asynchronus": True}, None),  # a misspelt keyword
        Use("Robot", "poll_motions", "call", (), {}, False),  # no such method
        Use("Gripper", "grasp_async", "call", (0.0, 0.1), {}, None),  # the force is missing
        Use("Gripper", "width", "get", result="0.08"),  # a str where franky gives a float
        Use("JointMotion", "__init__", "call", (np.zeros(6),), {}, None),  # a six-joint target for a Panda
        Use("RTDEControlInterface", "servoJ", "call", ([0.0] * 6, 0.0, 0.0, 0.1, 0.1), {}, True),  # gain missing
        Use("RTDEControlInterface", "servoJ", "call", ([0.0] * 6, 0.0, 0.0, 0.1, 0.1, 300.0), {}, "ok"),  # return
        Use("RTDEReceiveInterface", "getActualQ", "call", (), {}, np.zeros(6)),  # an array where ur_rtde gives a list
        Use("ControlExceptions", "__init__", "call", (), {}, None),  # no such class
    ]
    modules = [franky, rtde.rtde_control, rtde.rtde_receive]
    found = [problems([use], modules) for use in wrong]
    assert all(len(p) == 1 for p in found), found
    assert (
        problems(
            [
                Use(
                    "Gripper",
                    "grasp_async",
                    "call",
                    (0.0, 0.1, 40.0),
                    {"epsilon_outer": 0.08},
                    twin_franky.BoolFuture(True),
                )
            ],
            modules,
        )
        == []
    )


def _signature_problems(name: str, fake, real_overloads: list[Overload]) -> str | None:
    """None when the fake's parameters have the names, order and optionality of one real overload."""
    params = list(inspect.signature(fake).parameters.values())[1:]  # without self
    for overload in real_overloads:
        real = list(overload.signature.parameters.values())
        if len(params) > len(real):
            continue
        positional_only = [r.kind is inspect.Parameter.POSITIONAL_ONLY for r in real]
        if not all(p.name == r.name or po for p, r, po in zip(params, real, positional_only, strict=False)):
            continue
        if any(r.default is inspect.Parameter.empty for r in real[len(params) :]):
            continue  # the fake lacks a parameter the real one requires
        if any(
            p.default is inspect.Parameter.empty and r.default is not inspect.Parameter.empty
            for p, r in zip(params, real, strict=False)
        ):
            continue  # the fake requires what the real one does not
        return None
    return f"{name}{inspect.signature(fake)} matches no real signature: {[str(o.signature) for o in real_overloads]}"


def overloads_or_none(func, name: str) -> list[Overload] | None:
    try:
        return overloads(func, name)
    except LookupError:
        return None


def surface_problems(fake_classes: dict[str, object], module) -> list[str]:
    """Every public method and property of each fake class (`name: a live instance`) against the real class."""
    found = []
    for cls_name, instance in fake_classes.items():
        fake_cls, real_cls = type(instance), getattr(module, cls_name, None)
        if real_cls is None:
            found.append(f"{cls_name}: the real SDK has no such class")
            continue
        names = {n for c in fake_cls.__mro__[:-1] for n in vars(c) if not n.startswith("_") or n == "__init__"}
        for name in sorted(names - {"twin"}):  # the twin is the fake's own
            fake_member, real_member = (
                inspect.getattr_static(fake_cls, name),
                inspect.getattr_static(real_cls, name, None),
            )
            if name == "__init__" and not overloads_or_none(real_member, name):
                continue  # the SDK hands these out and binds no constructor: the fake's is its own
            if real_member is None:
                found.append(f"{cls_name}.{name}: the real {cls_name} has no {name}")
            elif inspect.isfunction(fake_member):
                found.append(_signature_problems(f"{cls_name}.{name}", fake_member, overloads(real_member, name)))
            elif isinstance(real_member, property):
                value, returns = getattr(instance, name), overloads(real_member, name)[0].returns
                if not fits(returns, value, module):
                    found.append(f"{cls_name}.{name}: the fake gives {value!r}; the real one gives {returns}")
    return [p for p in found if p]


def test_fake_franky_has_real_frankys_names_signatures_and_value_types(franky):
    fake = fake_franky.module_for(FrankaDriver(twin=True, clock=VirtualClock()).twin)
    robot = fake.Robot("172.16.0.2")
    instances = {
        "Robot": robot,
        "Gripper": fake.Gripper("172.16.0.2"),
        "JointMotion": fake.JointMotion(np.zeros(7)),
        "JointStopMotion": fake.JointStopMotion(),
        "JointState": fake.JointState(np.zeros(7)),
        "BoolFuture": fake.BoolFuture(True),
        "RobotState": robot.state,
    }
    assert surface_problems(instances, franky) == []
    state = robot.state
    for field in dataclasses.fields(state):  # RobotState's fields are the real one's properties, of its types
        assert fits(
            overloads(inspect.getattr_static(franky.RobotState, field.name), field.name)[0].returns,
            getattr(state, field.name),
            franky,
        )
    for name in ("RobotMode", "ReferenceType"):
        assert set(getattr(fake, name).__members__) <= set(getattr(franky, name).__members__), name
    for name in ("ControlException", "CommandException", "NetworkException"):
        assert issubclass(getattr(franky, name), Exception) and issubclass(getattr(fake, name), Exception)


def test_fake_ur_rtde_has_real_ur_rtdes_names_signatures_and_value_types(rtde):
    fake = fake_rtde.modules_for(URDriver(twin=True, clock=VirtualClock()).twin)
    instances = {
        "rtde_control": fake.rtde_control.RTDEControlInterface("192.168.1.10"),
        "rtde_receive": fake.rtde_receive.RTDEReceiveInterface("192.168.1.10"),
        "dashboard_client": fake.dashboard_client.DashboardClient("192.168.1.10"),
    }
    for module_name, instance in instances.items():
        assert surface_problems({type(instance).__name__: instance}, getattr(rtde, module_name)) == [], module_name
