"""An arm's own resets (`env.reset_mode`, robo_rl/envs/resets.py), the same on its MuJoCo twin and on metal.

`scripted_reset` returns the arm to its home pose, gripper open; `replay_reset` drives it through a taught trajectory's
joint waypoints. Both move in joint space at a bounded speed and pass every joint target through the safety layer's
joint guard (`ArmEnv.joint_guard`: joint limits, joint speed, the workspace box), as a policy's commands are. Where the
joint-space line home would take the tool out of the box, the move goes on one joint at a time, each step one the guard
allows. Where the guard holds every single joint too (the arm folded over at the box's far face: 0.3% of poses drawn
in the SO-101's box, and 3 calls in a two-hour run), the tool retreats in a straight line towards its home position
(the box is convex: the line stays in it), the joints from position-only IK whose null space pulls them towards home,
until the line home is open again. A move the guard still holds never arrives, and the check then calls a person.
`human_reset` is what the arm did at every reset before resets had modes: it homes itself (the driver's own move), and
the person resets the scene.
`reset_problem` checks the joints against home and the gripper, after giving the arm a moment to settle. `place_scene`
is the simulated person: on a twin, the arm moved home by hand. `camera_frames` is what the cameras see now (the camera
check, `env.reset_check=camera`).
"""

from __future__ import annotations

import logging

import numpy as np

from hardware.arm import HardwareError
from robo_rl.envs.resets import ResetSettings

log = logging.getLogger(__name__)

RESET_SPEED_RAD_S = 0.5  # the reset's joint speed (the driver's own home move uses the same)
ARRIVED_RAD = 0.02  # every joint this close to a waypoint: it is reached
SETTLE_S = 2.0  # the check waits up to this long (driver clock) for the arm to stop and the gripper to open
SETTLE_POLL_S = 0.05
GRIPPER_OPEN = 0.1  # the gripper reading (0 open .. 1 closed) below which it counts as open
RETREAT_STEP_M = 0.01  # the tool's step per control period while it retreats towards its home position
RETREAT_STEPS = 40  # control periods of retreat before the line home is tried again


class ArmResets:
    """Mixed into ArmEnv: the arm's reset methods (it provides the driver, its model, `joint_guard`, `_read`)."""

    def _reset_settings(self, mode, trajectory, tolerance_rad, person, wait_s, check, classifier) -> ResetSettings:
        return ResetSettings(mode, trajectory, tolerance_rad, person, wait_s, check, classifier)

    # --- what the arm does --------------------------------------------------------------------
    def human_reset(self) -> None:
        self._recover_fault()
        self.driver.home(timeout_s=self.reset_timeout_s)

    def scripted_reset(self) -> None:
        self._recover_fault()
        self._guarded_move(self.driver.home_joints, 0.0)

    def replay_reset(self, waypoints: np.ndarray) -> None:
        self._recover_fault()
        dof = self.model.dof
        for waypoint in waypoints:
            if not self._guarded_move(waypoint[:dof], float(waypoint[dof])):
                log.warning("the taught reset stopped short of a waypoint: the reset check decides what follows")
                return

    def reset_pose_names(self) -> tuple[str, tuple[str, ...]]:
        return "joints", (*self.model.joint_names, "gripper")

    def reset_pose(self) -> list[float]:
        state = self.driver.read()
        return [*state.joints.tolist(), float(state.gripper)]

    def place_scene(self, rng: np.random.Generator) -> None:
        """A simulated person moves the twin's arm home by hand, gripper open (the metal needs a real person)."""
        twin = self.driver_twin
        if twin is None:
            raise HardwareError(
                "env.reset_person=sim moves a twin's arm by hand: a real arm needs reset_person=devices"
            )
        twin.move_by_hand(self.driver.home_joints, gripper=0.0)

    def camera_frames(self) -> dict[str, np.ndarray]:
        """Each camera's frame now (camera → uint8 [H, W, 3]), as the next observation would show it."""
        return self._observe(self._read())[0]["images"]

    # --- the check ----------------------------------------------------------------------------
    def reset_problem(self, tolerance_rad: float) -> str | None:
        clock = self.driver.clock
        deadline = clock.now() + SETTLE_S
        while True:
            state = self.driver.read()
            off = np.abs(state.joints - self.driver.home_joints)
            gripper_open = not self.has_gripper or state.gripper < GRIPPER_OPEN
            still = float(np.max(np.abs(state.joint_vel))) < ARRIVED_RAD
            if state.fault or (off.max() <= tolerance_rad and gripper_open and still) or clock.now() >= deadline:
                break
            clock.sleep_until(clock.now() + SETTLE_POLL_S)
        problems = []
        if state.fault:
            problems.append(f"the arm reports a fault ({state.fault})")
        if off.max() > tolerance_rad:
            joint = self.model.joint_names[int(np.argmax(off))]
            problems.append(f"the arm is {off.max():.2f} rad from its home pose ({joint})")
        if not gripper_open:
            problems.append(f"the gripper is not open ({state.gripper:.2f} closed)")
        return "; ".join(problems) or None

    # --- moves --------------------------------------------------------------------------------
    def _recover_fault(self) -> None:
        state = self.driver.read()
        if state.fault:
            log.warning("%s reports a fault (%s): recovering before the reset", self.driver.robot, state.fault)
            self.driver.recover()

    def _guarded_move(self, q_goal, gripper: float) -> bool:
        """Joint targets from where the arm is toward `q_goal` at RESET_SPEED_RAD_S, one per control period, each
        through the safety layer's joint guard; True once the arm is there, False after `reset_timeout_s`."""
        q_goal = self.model.clip(np.asarray(q_goal, float))
        clock, period = self.driver.clock, 1.0 / self.control_hz
        start = tick = clock.now()
        q_cmd = self._read().joints
        grip = gripper if self.has_gripper else None
        retreat = 0  # control periods of retreat left
        while clock.now() - start <= self.reset_timeout_s:
            state = self._read()
            if np.max(np.abs(state.joints - q_goal)) < ARRIVED_RAD:
                return True
            step = np.clip(q_goal - q_cmd, -RESET_SPEED_RAD_S * period, RESET_SPEED_RAD_S * period)
            q_next = q_cmd + step
            if retreat:
                q_next, retreat = self._retreat_step(q_cmd, q_goal, state, period), retreat - 1
                if np.array_equal(q_next, state.joints):  # held there too: the line home again
                    retreat = 0
            elif self.joint_guard is not None:
                q_next, notes = self.joint_guard(q_next, state, period)
                if "workspace_joint" in notes:  # the straight path leaves the box here: one joint that stays in it
                    q_next = self._one_joint_step(q_cmd, step, state, period)
                    if np.array_equal(q_next, state.joints):  # no joint alone either: the tool retreats
                        retreat = RETREAT_STEPS
            self.driver.command_joints(q_next, grip)
            q_cmd = q_next
            tick = max(tick + period, clock.now())
            clock.sleep_until(tick)
        return bool(np.max(np.abs(self._read().joints - q_goal)) < ARRIVED_RAD)

    def _one_joint_step(self, q_cmd: np.ndarray, step: np.ndarray, state, period: float) -> np.ndarray:
        """Where the joint-space line home would take the tool out of the workspace box: the step of the one joint,
        farthest from home first, that the guard lets through alone; held (the joints as they are) when none is."""
        for j in np.argsort(-np.abs(step)):
            if abs(step[j]) < 1e-9:
                break
            q_try = q_cmd.copy()
            q_try[j] += step[j]
            guarded, notes = self.joint_guard(q_try, state, period)
            if "workspace_joint" not in notes:
                return guarded
        return state.joints

    def _retreat_step(self, q_cmd: np.ndarray, q_goal: np.ndarray, state, period: float) -> np.ndarray:
        """One step of the tool straight towards where `q_goal` puts it, RETREAT_STEP_M at most, the joints from
        position-only IK warm-started at `q_cmd` (its null space pulls them towards home), through the guard."""
        here, there = self.model.fk(q_cmd)[0], self.model.fk(q_goal)[0]
        gap = there - here
        distance = float(np.linalg.norm(gap))
        target = there if distance <= RETREAT_STEP_M else here + gap * (RETREAT_STEP_M / distance)
        q_next = self.model.ik(target, None, q_cmd, iters=10).q
        guarded, notes = self.joint_guard(q_next, state, period)
        return state.joints if "workspace_joint" in notes else guarded
