"""Fake `ur_rtde` clients backed by an `ArmTwin`: what `URDriver` talks to in CI in place of the controller.

They have ur_rtde 1.6's names, signatures and return types for the part a joint-streaming driver uses:
`rtde_control.RTDEControlInterface` (servoJ, servoStop, moveJ, stopJ, zeroFtSensor, the control script's state),
`rtde_receive.RTDEReceiveInterface` (actual q, qd, TCP force, safety mode), `dashboard_client.DashboardClient`
(unlocking a protective stop), and the Robotiq URCap's socket (port 63352, ASCII GET/SET). A twin fault is a
protective stop: the control script stops, servoJ is refused until the dashboard unlocks it and the script is
uploaded again.
"""

from __future__ import annotations

import types

import numpy as np

from hardware.twin import ArmTwin

SAFETY_NORMAL, SAFETY_PROTECTIVE_STOP = 1, 3  # RTDE safety_mode
ROBOT_MODE_RUNNING = 7
ROBOTIQ_MAX = 255
ROBOTIQ_ACTIVE = 3  # STA after activation
ROBOTIQ_AT_POSITION = 3  # OBJ: arrived, no object
REACHED_RAD = 1e-3  # a blocking moveJ is finished this close to its target
WAIT_STEP_S = 0.01
WAIT_TIMEOUT_S = 30.0


class _Session:
    """An RTDE connection's state: ur_rtde's connect/disconnect calls on both interfaces."""

    _connected = True

    def isConnected(self) -> bool:  # noqa: N802 - ur_rtde's names
        return self._connected

    def disconnect(self) -> None:
        self._connected = False

    def reconnect(self) -> bool:
        self._connected = True
        return True


class RTDEControlInterface(_Session):
    """ur_rtde's control interface on the twin. `twin` is set by `modules_for`."""

    twin: ArmTwin
    FLAG_UPLOAD_SCRIPT = 1

    def __init__(
        self,
        hostname: str,
        frequency: float = -1.0,
        flags: int = FLAG_UPLOAD_SCRIPT,
        ur_cap_port: int = 50002,
        rt_priority: int = 0,
    ) -> None:
        self.hostname = hostname
        self._connected = True
        self._script = True  # the constructor uploads and starts the RTDE control script
        self.servo_calls: list[tuple[float, float, float]] = []  # (time, lookahead_time, gain) of each servoJ

    def _running(self) -> bool:
        if self.twin.fault is not None:  # a protective stop ends the program
            self._script = False
        return self._connected and self._script

    def servoJ(
        self, q: list[float], speed: float, acceleration: float, time: float, lookahead_time: float, gain: float
    ) -> bool:
        if not self._running():
            return False
        self.twin.set_target(np.asarray(q, float))
        self.servo_calls.append((time, lookahead_time, gain))
        del self.servo_calls[:-100]
        return True

    def servoStop(self, a: float = 10.0) -> bool:
        if not self._running():
            return False
        self.twin.set_target(self.twin.read()[1])
        return True

    def stopJ(self, a: float = 2.0, asynchronous: bool = False) -> None:
        self.servoStop(a)

    def moveJ(self, q: list[float], speed: float = 1.05, acceleration: float = 1.4, asynchronous: bool = False) -> bool:
        if not self._running():
            return False
        target = np.asarray(q, float)
        self.twin.set_target(target)
        clock, deadline = self.twin.clock, self.twin.clock.now() + WAIT_TIMEOUT_S
        while not asynchronous and np.max(np.abs(self.twin.read()[1] - self.twin.target)) >= REACHED_RAD:
            if not self._running() or clock.now() > deadline:
                return False
            clock.sleep_until(clock.now() + WAIT_STEP_S)
        return True

    def teachMode(self) -> bool:  # noqa: N802 - ur_rtde's name
        with self.twin.lock:
            self.twin.torque_enabled = False
        return True

    def endTeachMode(self) -> bool:  # noqa: N802 - ur_rtde's name
        with self.twin.lock:
            self.twin.move_by_hand(self.twin.read()[1])  # the servo holds where the hand left it
            self.twin.torque_enabled = True
        return True

    def zeroFtSensor(self) -> bool:
        return True  # the twin's force has no offset

    def triggerProtectiveStop(self) -> bool:
        self.twin.fault = "protective stop triggered"
        return True

    def isProgramRunning(self) -> bool:
        return self._running()

    def reuploadScript(self) -> bool:
        if self.twin.fault is not None or not self._connected:
            return False
        self._script = True
        return True

    def stopScript(self) -> None:
        self._script = False

    def isSteady(self) -> bool:
        return bool(np.all(np.abs(self.twin.read()[2]) < REACHED_RAD))


class RTDEReceiveInterface(_Session):
    """ur_rtde's receive interface on the twin."""

    twin: ArmTwin

    def __init__(
        self,
        hostname: str,
        frequency: float = -1.0,
        variables: list[str] | None = None,
        verbose: bool = False,
        use_upper_range_registers: bool = False,
        rt_priority: int = 0,
    ) -> None:
        self.hostname = hostname
        self._connected = True

    def getActualQ(self) -> list[float]:
        return self.twin.read()[1].tolist()

    def getActualQd(self) -> list[float]:
        return self.twin.read()[2].tolist()

    def getActualTCPForce(self) -> list[float]:
        return [0.0, 0.0, -self.twin.force_n(), 0.0, 0.0, 0.0]  # the environment pushes the tool up

    def getSafetyMode(self) -> int:
        return SAFETY_PROTECTIVE_STOP if self.twin.fault is not None else SAFETY_NORMAL

    def isProtectiveStopped(self) -> bool:
        return self.twin.fault is not None

    def isEmergencyStopped(self) -> bool:
        return False

    def getRobotMode(self) -> int:
        return ROBOT_MODE_RUNNING

    def getTimestamp(self) -> float:
        return self.twin.clock.now()


class DashboardClient:
    """ur_rtde's dashboard client (port 29999) on the twin."""

    twin: ArmTwin

    def __init__(self, hostname: str, port: int = 29999, verbose: bool = False) -> None:
        self.hostname = hostname
        self._connected = False

    def connect(self, timeout_ms: int = 2000) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def isConnected(self) -> bool:
        return self._connected

    def _need_connection(self) -> None:
        if not self._connected:
            raise RuntimeError("Please connect before using the dashboard client")

    def closeSafetyPopup(self) -> None:
        self._need_connection()

    def unlockProtectiveStop(self) -> None:
        self._need_connection()
        if self.twin.fault is not None:
            self.twin.fault = None
            self.twin.set_target(self.twin.read()[1])  # the stopped program's target is gone: the arm stays

    def safetystatus(self) -> str:
        self._need_connection()
        return "Safetystatus: " + ("PROTECTIVE_STOP" if self.twin.fault is not None else "NORMAL")


class RobotiqURCap:
    """The Robotiq URCap's command server on the twin's controller: the gripper's state (activation) lives here,
    shared by every socket opened to it."""

    def __init__(self, twin: ArmTwin) -> None:
        self.twin = twin
        self.vars = {"ACT": 0, "GTO": 0, "SPE": ROBOTIQ_MAX, "FOR": ROBOTIQ_MAX, "FLT": 0}
        self.lines: list[str] = []  # every request, oldest first

    def answer(self, line: str) -> str:
        self.lines.append(line)
        words = line.split()
        if len(words) >= 3 and words[0] == "SET" and len(words) % 2 == 1:
            for var, value in zip(words[1::2], words[2::2], strict=True):
                self.vars[var] = int(value)
                if var == "POS":
                    self.twin.read()  # brings the twin up to now before its target changes
                    with self.twin.lock:
                        self.twin.gripper_target = float(np.clip(int(value) / ROBOTIQ_MAX, 0.0, 1.0))
            return "ack"
        if len(words) == 2 and words[0] == "GET":
            var = words[1]
            if var == "POS":
                value = round(self.twin.read()[3] * ROBOTIQ_MAX)
            elif var == "STA":
                value = ROBOTIQ_ACTIVE if self.vars["ACT"] else 0
            elif var == "OBJ":
                value = ROBOTIQ_AT_POSITION if abs(self.twin.read()[3] - self.twin.gripper_target) < 1e-3 else 0
            else:
                value = self.vars.get(var, 0)
            return f"{var} {value}"
        return "?"


class RobotiqSocket:
    """A socket to the URCap: `sendall` a request line, `recv` its reply."""

    def __init__(self, server: RobotiqURCap) -> None:
        self.server = server
        self._replies: list[bytes] = []
        self.closed = False

    def sendall(self, data: bytes) -> None:
        if self.closed:
            raise OSError("socket closed")
        for line in data.decode().splitlines():
            if line.strip():
                self._replies.append(self.server.answer(line.strip()).encode())

    def recv(self, bufsize: int) -> bytes:
        return self._replies.pop(0) if self._replies else b""

    def settimeout(self, timeout: float | None) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def modules_for(twin: ArmTwin) -> types.SimpleNamespace:
    """`rtde_control`, `rtde_receive`, `dashboard_client` modules and the gripper's `socket_connect`, all driving
    `twin` (pass them as `URDriver(rtde_modules=...)`); `urcap` is the fake gripper server, for tests."""

    def module(name: str, cls: type) -> types.ModuleType:
        mod = types.ModuleType(name, f"fake {name} backed by a MuJoCo twin (hardware.fake_rtde)")
        setattr(mod, cls.__name__, type(cls.__name__, (cls,), {"twin": twin}))
        return mod

    urcap = RobotiqURCap(twin)

    def socket_connect(address: tuple[str, int], timeout: float | None = None) -> RobotiqSocket:
        return RobotiqSocket(urcap)

    return types.SimpleNamespace(
        rtde_control=module("rtde_control", RTDEControlInterface),
        rtde_receive=module("rtde_receive", RTDEReceiveInterface),
        dashboard_client=module("dashboard_client", DashboardClient),
        socket_connect=socket_connect,
        urcap=urcap,
    )
