"""A Feetech bus backed by a MuJoCo twin: lerobot's `FeetechMotorsBus` with only the serial SDK replaced.

`FakeFeetechBus` is lerobot's bus class; what it talks to is fake: a port handler, a packet handler and the group
sync read/write objects with exactly the `scservo_sdk` methods lerobot calls, over one STS3215 register table per
motor (addresses from lerobot's own control table). Reading `Present_Position` reads the twin's joints through the
motor's encoder and homing offset, writing `Goal_Position` sets the twin's targets, `Torque_Enable` switches the
twin's torque and `Present_Current` reports the twin's load. Every other register just stores what is written, as
motor EEPROM does. So lerobot's calibration check, normalisation, sign encoding and sync read/write all run for
real, and neither `feetech-servo-sdk` nor pyserial is needed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import threading
from functools import cached_property

from lerobot.motors.encoding_utils import decode_sign_magnitude, encode_sign_magnitude
from lerobot.motors.feetech import FeetechMotorsBus
from lerobot.motors.feetech.tables import (
    MODEL_CONTROL_TABLE,
    MODEL_ENCODING_TABLE,
    MODEL_NUMBER,
    MODEL_NUMBER_TABLE,
    MODEL_RESOLUTION,
)
from lerobot.motors.motors_bus import MotorCalibration, MotorsBusBase

from hardware.twin import LOAD_AT_REST, ArmTwin

# scservo_sdk's result codes (protocol_packet_handler.py)
COMM_SUCCESS = 0
COMM_TX_FAIL = -2
COMM_RX_TIMEOUT = -6
NO_ERROR = 0x00
RESULT_TEXT = {
    COMM_SUCCESS: "[TxRxResult] Communication success!",
    COMM_TX_FAIL: "[TxRxResult] Failed transmit instruction packet!",
    COMM_RX_TIMEOUT: "[TxRxResult] There is no status packet!",
}

FIRMWARE = (3, 10)  # major, minor: what STS3215s on SO-101 kits report
REGISTER_BYTES = 128  # the STS control table ends below this address
LOAD_FULL_SCALE = 1000  # Present_Load units (0.1 %) at the motor's limit
PRESENT_VOLTAGE_DV = 120  # 12.0 V supply, in the register's 0.1 V units
PRESENT_TEMPERATURE_C = 30
MOVING_TOL_STEPS = 2  # `Moving` reads 1 while a joint is further than this from its goal


@dataclasses.dataclass(frozen=True)
class TwinServo:
    """One motor on the fake bus and how its encoder sees the twin. `joint`: index into the twin's arm joints, None
    for the gripper (twin value 0 open .. 1 closed). Encoder step (before the homing offset) = zero_step + value *
    steps_per_unit, value in rad for a joint. `calibration` is what the motor's EEPROM holds at power-on."""

    id: int
    joint: int | None
    zero_step: float
    steps_per_unit: float
    calibration: MotorCalibration
    model: str = "sts3215"


class FakeFeetechServos:
    """The motors daisy-chained on the fake bus: their register tables, kept in step with the twin."""

    def __init__(self, twin: ArmTwin, servos: list[TwinServo], current_full_load: int) -> None:
        self.twin = twin
        self.servos = {s.id: s for s in servos}
        self.current_full_load = current_full_load  # Present_Current units at the load fraction 1.0
        self.lock = threading.RLock()
        self.memory = {s.id: bytearray(REGISTER_BYTES) for s in servos}
        for s in servos:
            self._put(s.id, "Firmware_Major_Version", FIRMWARE[0])
            self._put(s.id, "Firmware_Minor_Version", FIRMWARE[1])
            self._put(s.id, "Model_Number", MODEL_NUMBER_TABLE[s.model])
            self._put(s.id, "ID", s.id)
            self._put(s.id, "Min_Position_Limit", s.calibration.range_min)
            self._put(s.id, "Max_Position_Limit", s.calibration.range_max)
            self._put(s.id, "Homing_Offset", s.calibration.homing_offset)
            self._put(s.id, "Max_Torque_Limit", LOAD_FULL_SCALE)
            self._put(s.id, "Torque_Enable", int(twin.torque_enabled))
            self._put(s.id, "Present_Voltage", PRESENT_VOLTAGE_DV)
            self._put(s.id, "Present_Temperature", PRESENT_TEMPERATURE_C)
        self.torque = {s.id: twin.torque_enabled for s in servos}
        self._refresh()
        for s in servos:  # a powered motor holds where it is
            self._put(s.id, "Goal_Position", self._get(s.id, "Present_Position"))

    # --- register access by name --------------------------------------------------------------
    def _addr(self, servo_id: int, name: str) -> tuple[int, int]:
        return MODEL_CONTROL_TABLE[self.servos[servo_id].model][name]

    def _put(self, servo_id: int, name: str, value: int) -> None:
        addr, length = self._addr(servo_id, name)
        sign_bit = MODEL_ENCODING_TABLE[self.servos[servo_id].model].get(name)
        raw = encode_sign_magnitude(int(value), sign_bit) if sign_bit is not None else int(value)
        self.memory[servo_id][addr : addr + length] = raw.to_bytes(length, "little")

    def _get(self, servo_id: int, name: str) -> int:
        addr, length = self._addr(servo_id, name)
        raw = int.from_bytes(self.memory[servo_id][addr : addr + length], "little")
        sign_bit = MODEL_ENCODING_TABLE[self.servos[servo_id].model].get(name)
        return decode_sign_magnitude(raw, sign_bit) if sign_bit is not None else raw

    def _touches(self, servo_id: int, name: str, addr: int, length: int) -> bool:
        reg, reg_len = self._addr(servo_id, name)
        return addr < reg + reg_len and reg < addr + length

    # --- the twin behind the registers --------------------------------------------------------
    def _resolution(self, servo_id: int) -> int:
        return MODEL_RESOLUTION[self.servos[servo_id].model]

    def _present_step(self, servo_id: int, value: float) -> int:
        """Present_Position at twin `value`: the encoder step less the homing offset, within one turn."""
        s = self.servos[servo_id]
        actual = s.zero_step + value * s.steps_per_unit
        return int(round(actual - self._get(servo_id, "Homing_Offset"))) % self._resolution(servo_id)

    def _refresh(self) -> None:
        """Write the twin's state now into the read-only registers."""
        _, q, dq, gripper = self.twin.read()
        load = self.twin.load()
        twin = self.twin
        for sid, s in self.servos.items():
            value = gripper if s.joint is None else q[s.joint]
            goal = twin.gripper_target if s.joint is None else twin.target[s.joint]
            present = self._present_step(sid, value)
            frac = (LOAD_AT_REST if twin.torque_enabled else 0.0) if s.joint is None else float(load[s.joint])
            velocity = 0.0 if s.joint is None else dq[s.joint] * s.steps_per_unit
            self._put(sid, "Present_Position", present)
            self._put(sid, "Present_Velocity", int(round(velocity)))
            self._put(sid, "Present_Load", int(round(frac * LOAD_FULL_SCALE)))
            self._put(sid, "Present_Current", int(round(frac * self.current_full_load)))
            self._put(sid, "Moving", int(abs(goal - value) * abs(s.steps_per_unit) > MOVING_TOL_STEPS))
            self._put(sid, "Torque_Enable", int(self.torque[sid] and twin.torque_enabled))

    def _apply_goals(self, ids: list[int]) -> None:
        """Goal_Position (steps after the homing offset, clamped to the position limits as the motor does) to twin
        targets: one `set_target` per packet, as one sync write moves all joints at once."""
        twin = self.twin
        with twin.lock:
            target, gripper = twin.target.copy(), None
            for sid in ids:
                s = self.servos[sid]
                goal = self._get(sid, "Goal_Position")
                lo, hi = self._get(sid, "Min_Position_Limit"), self._get(sid, "Max_Position_Limit")
                if lo < hi:
                    goal = min(max(goal, lo), hi)
                res = self._resolution(sid)
                offset = (goal + self._get(sid, "Homing_Offset") - s.zero_step + res / 2) % res - res / 2
                value = offset / s.steps_per_unit
                if s.joint is None:
                    gripper = value
                else:
                    target[s.joint] = value
            twin.set_target(target, gripper)

    def _apply_torque(self, ids: list[int]) -> None:
        """A motor whose torque comes on holds where it is (its goal follows its present position); the twin's
        torque is on when every motor's is."""
        twin = self.twin
        wanted = {sid: self._get(sid, "Torque_Enable") == 1 for sid in ids}
        with twin.lock:
            _, q, _, gripper = twin.read()
            for sid, on in wanted.items():
                s = self.servos[sid]
                if on and not (self.torque[sid] and twin.torque_enabled):
                    value = gripper if s.joint is None else q[s.joint]
                    if s.joint is None:
                        twin.gripper_target = value
                    else:
                        twin.target[s.joint] = value
                    self._put(sid, "Goal_Position", self._present_step(sid, value))
                self.torque[sid] = on
            twin.torque_enabled = all(self.torque.values())

    # --- what the packet handler does ---------------------------------------------------------
    def read(self, servo_id: int, addr: int, length: int) -> tuple[int, int]:
        with self.lock:
            if servo_id not in self.servos:
                return 0, COMM_RX_TIMEOUT
            self._refresh()
            return int.from_bytes(self.memory[servo_id][addr : addr + length], "little"), COMM_SUCCESS

    def sync_read(self, ids: list[int], addr: int, length: int) -> tuple[dict[int, bytes], int]:
        with self.lock:
            if any(i not in self.servos for i in ids):
                return {}, COMM_RX_TIMEOUT
            self._refresh()
            return {i: bytes(self.memory[i][addr : addr + length]) for i in ids}, COMM_SUCCESS

    def write(self, writes: dict[int, list[int]], addr: int) -> int:
        """Store `writes` (servo id: data bytes) at `addr` on each servo, then act on the registers they touched."""
        with self.lock:
            if any(i not in self.servos for i in writes):
                return COMM_RX_TIMEOUT
            for sid, data in writes.items():
                self.memory[sid][addr : addr + len(data)] = bytes(data)
            ids, length = list(writes), len(next(iter(writes.values()), []))
            if any(self._touches(i, "Torque_Enable", addr, length) for i in ids):
                self._apply_torque(ids)
            if any(self._touches(i, "Goal_Position", addr, length) for i in ids):
                self._apply_goals(ids)
            return COMM_SUCCESS


# --- the scservo_sdk objects lerobot calls -------------------------------------------------------
class FakePortHandler:
    def __init__(self, port_name: str) -> None:
        self.port_name = port_name
        self.is_open = False
        self.is_using = False
        self.baudrate = 1_000_000
        self.packet_timeout = 0.0

    def openPort(self) -> bool:  # noqa: N802 (the SDK's names)
        self.is_open = True
        return True

    def closePort(self) -> None:  # noqa: N802
        self.is_open = False

    def clearPort(self) -> None:  # noqa: N802
        pass

    def setBaudRate(self, baudrate: int) -> bool:  # noqa: N802
        self.baudrate = baudrate
        return True

    def getBaudRate(self) -> int:  # noqa: N802
        return self.baudrate

    def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802
        pass

    def setPacketTimeoutMillis(self, msec: float) -> None:  # noqa: N802
        self.packet_timeout = msec

    def isPacketTimeout(self) -> bool:  # noqa: N802
        return False


class FakePacketHandler:
    def __init__(self, servos: FakeFeetechServos) -> None:
        self.servos = servos

    def getTxRxResult(self, result: int) -> str:  # noqa: N802
        return RESULT_TEXT.get(result, f"[TxRxResult] error {result}")

    def getRxPacketError(self, error: int) -> str:  # noqa: N802
        return f"[RxPacketError] status {error:#04x}"

    def ping(self, port: FakePortHandler, servo_id: int) -> tuple[int, int, int]:
        if not port.is_open:
            return 0, COMM_TX_FAIL, NO_ERROR
        model_nb, comm = self.servos.read(servo_id, *MODEL_NUMBER)
        return model_nb, comm, NO_ERROR

    def _read(self, port: FakePortHandler, servo_id: int, addr: int, length: int) -> tuple[int, int, int]:
        if not port.is_open:
            return 0, COMM_TX_FAIL, NO_ERROR
        value, comm = self.servos.read(servo_id, addr, length)
        return value, comm, NO_ERROR

    def read1ByteTxRx(self, port, servo_id, addr):  # noqa: N802
        return self._read(port, servo_id, addr, 1)

    def read2ByteTxRx(self, port, servo_id, addr):  # noqa: N802
        return self._read(port, servo_id, addr, 2)

    def read4ByteTxRx(self, port, servo_id, addr):  # noqa: N802
        return self._read(port, servo_id, addr, 4)

    def writeTxRx(self, port, servo_id, addr, length, data) -> tuple[int, int]:  # noqa: N802
        if not port.is_open:
            return COMM_TX_FAIL, NO_ERROR
        return self.servos.write({servo_id: list(data[:length])}, addr), NO_ERROR

    def write1ByteTxRx(self, port, servo_id, addr, value):  # noqa: N802
        return self.writeTxRx(port, servo_id, addr, 1, [value])

    def write2ByteTxRx(self, port, servo_id, addr, value):  # noqa: N802
        return self.writeTxRx(port, servo_id, addr, 2, list(int(value).to_bytes(2, "little")))


class FakeGroupSyncRead:
    def __init__(self, port: FakePortHandler, ph: FakePacketHandler, start_address: int, data_length: int) -> None:
        self.port, self.ph = port, ph
        self.start_address, self.data_length = start_address, data_length
        self.ids: list[int] = []
        self.data: dict[int, bytes] = {}

    def addParam(self, servo_id: int) -> bool:  # noqa: N802
        if servo_id in self.ids:
            return False
        self.ids.append(servo_id)
        return True

    def removeParam(self, servo_id: int) -> None:  # noqa: N802
        if servo_id in self.ids:
            self.ids.remove(servo_id)

    def clearParam(self) -> None:  # noqa: N802
        self.ids.clear()

    def txRxPacket(self) -> int:  # noqa: N802
        if not self.port.is_open:
            return COMM_TX_FAIL
        self.data, comm = self.ph.servos.sync_read(self.ids, self.start_address, self.data_length)
        return comm

    def isAvailable(self, servo_id: int, addr: int, length: int) -> bool:  # noqa: N802
        start = addr - self.start_address
        return servo_id in self.data and start >= 0 and start + length <= self.data_length

    def getData(self, servo_id: int, addr: int, length: int) -> int:  # noqa: N802
        if not self.isAvailable(servo_id, addr, length):
            return 0
        start = addr - self.start_address
        return int.from_bytes(self.data[servo_id][start : start + length], "little")


class FakeGroupSyncWrite:
    def __init__(self, port: FakePortHandler, ph: FakePacketHandler, start_address: int, data_length: int) -> None:
        self.port, self.ph = port, ph
        self.start_address, self.data_length = start_address, data_length
        self.data: dict[int, list[int]] = {}

    def addParam(self, servo_id: int, data: list[int]) -> bool:  # noqa: N802
        if servo_id in self.data or len(data) != self.data_length:
            return False
        self.data[servo_id] = list(data)
        return True

    def changeParam(self, servo_id: int, data: list[int]) -> bool:  # noqa: N802
        if servo_id not in self.data or len(data) != self.data_length:
            return False
        self.data[servo_id] = list(data)
        return True

    def removeParam(self, servo_id: int) -> None:  # noqa: N802
        self.data.pop(servo_id, None)

    def clearParam(self) -> None:  # noqa: N802
        self.data.clear()

    def txPacket(self) -> int:  # noqa: N802
        if not self.port.is_open:
            return COMM_TX_FAIL
        return self.ph.servos.write(self.data, self.start_address) if self.data else COMM_SUCCESS


class FakeFeetechBus(FeetechMotorsBus):
    """lerobot's Feetech bus over `FakeFeetechServos`. Its `__init__` does what SerialMotorsBus's and
    FeetechMotorsBus's do minus their package checks (feetech-servo-sdk, pyserial, deepdiff) and with fake SDK
    objects; the three methods that call `scs` or DeepDiff directly are replaced, every other one is lerobot's."""

    def __init__(
        self,
        port: str,
        motors: dict,
        calibration: dict | None = None,
        protocol_version: int = 0,
        *,
        servos: FakeFeetechServos,
    ) -> None:
        MotorsBusBase.__init__(self, port, motors, calibration)
        self._id_to_model_dict = {m.id: m.model for m in self.motors.values()}
        self._id_to_name_dict = {m.id: motor for motor, m in self.motors.items()}
        self._model_nb_to_model_dict = {v: k for k, v in self.model_number_table.items()}
        self._validate_motors()
        self.protocol_version = protocol_version
        self._assert_same_protocol()
        self.port_handler = FakePortHandler(port)
        self.packet_handler = FakePacketHandler(servos)
        self.sync_reader = FakeGroupSyncRead(self.port_handler, self.packet_handler, 0, 0)
        self.sync_writer = FakeGroupSyncWrite(self.port_handler, self.packet_handler, 0, 0)
        self._comm_success = COMM_SUCCESS
        self._no_error = NO_ERROR
        self.servos = servos

    @cached_property
    def _has_different_ctrl_tables(self) -> bool:
        first = self.model_ctrl_table[self.models[0]] if self.models else None
        return any(self.model_ctrl_table[m] != first for m in self.models[1:])

    def _split_into_byte_chunks(self, value: int, length: int) -> list[int]:
        return list(int(value).to_bytes(length, "little"))  # protocol 0 (STS) is little-endian

    def _broadcast_ping(self) -> tuple[dict[int, int], int]:
        if not self.port_handler.is_open:
            return {}, COMM_TX_FAIL
        return dict.fromkeys(self.servos.servos, NO_ERROR), COMM_SUCCESS


_BUS_SWAP_LOCK = threading.Lock()


@contextlib.contextmanager
def _fake_bus_in(module_name: str, servos: FakeFeetechServos):
    module = sys.modules[module_name]
    real = module.FeetechMotorsBus
    module.FeetechMotorsBus = functools.partial(FakeFeetechBus, servos=servos)
    try:
        yield
    finally:
        module.FeetechMotorsBus = real


def robot_on_fake_bus(robot_cls: type, config, servos: FakeFeetechServos):
    """`robot_cls(config)` (a lerobot Feetech robot such as SOFollower) with a `FakeFeetechBus` for its `bus`.

    Its `__init__` builds the bus from the name `FeetechMotorsBus` in its own module, and the real class demands the
    SDK, so that one name points at the fake while the constructor runs (under a lock, restored after): the motor
    table, the calibration file and every later call (connect, configure, get_observation, send_action,
    disconnect) stay lerobot's own code. Copying the constructor instead would let its motor table drift.
    """
    with _BUS_SWAP_LOCK, _fake_bus_in(robot_cls.__module__, servos):
        robot = robot_cls(config)
    if not isinstance(robot.bus, FakeFeetechBus):
        raise TypeError(f"{robot_cls.__name__} did not build its bus from `FeetechMotorsBus` in its module")
    return robot
