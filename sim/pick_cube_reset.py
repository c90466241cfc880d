"""The pick task's own resets (`env.reset_mode`, robo_rl/envs/resets.py): what the arm does between episodes, with the
physics running, and the check that the scene is as an episode should start.

`scripted_reset` sets a cube it still holds down in its start region (dropped from a lift's height it can bounce out
of reach), lets go of anything else, moves the cube to a point drawn afresh in its start region (grasped from above
like the scripted expert does, set down there, let go), and returns the arm to its home pose with the gripper open,
then lets the scene come to rest. It moves the cube even when the cube already lies in its region: an episode that
failed without touching the cube would otherwise hand the next one the very same scene, and a policy that fails
there fails there again, episode after episode (a 40-minute run sat on one such scene for 20 minutes, 0 successes;
a person resetting by hand places the cube anew each time). The gripper cannot turn, so it sets the cube down square
to itself; it then turns the cube to a yaw drawn as the env draws it (uniform within `cube_yaw_range_rad`) by pushing
a side face off its centre with the closed fingers, reading the yaw as it pushes (`_turn_to`). Without the turn every
episode started square, an easier task than the env's own placement (a two-hour run's policy trained so scored 0.84
on the env's placement, one trained on hand resets 0.92). A cube it cannot reach (pushed off the table, or more than
RESET_REACH_MARGIN_M past the policy's workspace) or cannot grasp twice is left where it is: the check then fails and
a person is asked. The policy's workspace box bounds what RL may command;
the reset is trusted code and may reach a little further (the arm reaches well past the box), so that a cube the
policy pushed just out of its box does not call a person.
`replay_reset` drives the pinch point through a taught trajectory's end-effector waypoints the same way.
`reset_problem` checks the cube (in its start region, on the table, at rest), the gripper (open) and the arm (at
home). `place_scene` is what a simulated person does when asked: the env's own instant placement. `camera_frames`
is what the cameras see now (the camera check, `env.reset_check=camera`); `disturb_scene` leaves the scene as an
episode or a failed reset might, for frames the check labels (robo_rl/envs/reset_check.py). The arm's moves between
episodes render no camera frame: nobody looks at them.
"""

from __future__ import annotations

import contextlib

import mujoco
import numpy as np

from robo_rl.envs.resets import ResetSettings

CARRY_HEIGHT_M = 0.12  # the pinch point's height while carrying or travelling: clears a resting cube
APPROACH_ABOVE_M = 0.06  # hover this far above the cube centre before descending
GRASP_ABOVE_M = 0.01  # pinch point this far above the cube centre when closing (the pads cover its side)
PLACE_MARGIN_M = 0.02  # the set-down point is drawn this far inside the start region: where it lands may drift
PLACE_ABOVE_M = 0.012  # set down with the centre this far above its resting height: it drops a few mm, not pressed
CLOSE_STEPS = 3  # control steps with the gripper closing (or opening) before moving on
MOVE_TOLERANCE_M = 0.006  # a waypoint counts as reached within this
MOVE_MAX_STEPS = 25  # control steps allowed per waypoint (a 40 cm move takes about 10)
RESET_REACH_MARGIN_M = 0.1  # how far past the policy's workspace box (x, y) the reset may reach for the cube
SETTLE_MAX_STEPS = 15  # control steps of stillness allowed for the scene to come to rest
GRASP_ATTEMPTS = 2
AT_REST_M_S = 0.02  # the cube and the pinch point slower than this are at rest
ON_TABLE_M = 0.01  # the cube's centre at most this above its resting height lies on the table
GRASP_MAX_YAW_RAD = np.radians(15)  # a cube turned further from the fingers is squared before the grasp
TURN_TOLERANCE_RAD = np.radians(4)  # the cube's yaw this close to the drawn one is turned enough
TURN_PUSHES = 4  # pushes allowed per turn, alternately from the cube's +x and -x sides
TURN_OFFSET = 0.7  # push this share of the half-size off the face's centre: more torque than shove
TURN_STAND_OFF_M = 0.03  # a push starts this far out from the face (the closed fingers reach ~1 cm past the pinch)
TURN_DEPTH_M = 0.025  # and goes at most this far in past where the face began
TURN_LEAD_M = 0.025  # the first push shifts the cube this far towards the region's middle (median 1.8-2.9 cm)
# MuJoCo's own reset after a numerical blow-up (it logs "the simulation is unstable", resets the state and counts it
# in these warnings, which a full reset clears), each with what it says blew up
BLOW_UP_WARNINGS = {
    mujoco.mjtWarning.mjWARN_BADQPOS: "bad positions",
    mujoco.mjtWarning.mjWARN_BADQVEL: "bad velocities",
    mujoco.mjtWarning.mjWARN_BADQACC: "bad accelerations",
}
TURNED_OUT_M = 0.01  # a cube the turn left further outside its region is carried back (the check allows 3 cm)
TURN_SPEED = 0.3  # the push's share of the largest end-effector step: the yaw is read after every step
GRIPPER_OPEN_RAD = 0.08  # the 2F-85's driver joint below this (a tenth of its stroke) is open
POSE_NAMES = ("x", "y", "z", "gripper")  # a taught waypoint: pinch point (m) and gripper command (-1 open .. 1 closed)


class PickCubeResets:
    """Mixed into PickCubeEnv: the task's reset methods (it provides the scene, `_step`, `_is_grasped`, `_reset`)."""

    def _reset_settings(self, mode, trajectory, tolerance_m, person, wait_s, check, classifier) -> ResetSettings:
        settings = ResetSettings(mode, trajectory, tolerance_m, person, wait_s, check, classifier)
        if mode is not None and self.extra_cubes:
            raise ValueError(
                f"env.reset_mode={mode}: this task's resets move pick_cube's one cube, not {self.extra_cubes}"
            )
        return settings

    # --- what the arm does --------------------------------------------------------------------
    def scripted_reset(self) -> None:
        self._blown_up_before_reset = self._blown_up(clear=False)
        with self._cameras_off(), self._reset_reach():
            if self._is_grasped():  # a cube still held (an episode ended mid-lift) is set down, not dropped from there
                self._set_down(self._draw_start_xy())
            pinch = self.data.site_xpos[self._pinch]
            self._move_to([pinch[0], pinch[1], self._clear_height()], -1.0)  # let go, and rise clear of the table
            if self._cube_reachable():  # placed afresh even inside its region (see the docstring), or set down again
                for _ in range(GRASP_ATTEMPTS):
                    goal, yaw = self._draw_start_xy(), self.np_random.uniform(-1, 1) * self.cube_yaw_range_rad
                    if self._carry_to(goal + self._turn_lead(goal, yaw)):
                        self._turn_to(yaw)  # as the env draws it
                        if self._outside_region_m() > TURNED_OUT_M:  # the pushes took it too far: set down square
                            self._carry_to(goal)
                        break
            self._go_home()

    def replay_reset(self, waypoints: np.ndarray) -> None:
        with self._cameras_off():
            for waypoint in waypoints:
                self._move_to(waypoint[:3], float(waypoint[3]))
            self._settle()

    def reset_pose_names(self) -> tuple[str, tuple[str, ...]]:
        return "ee", POSE_NAMES

    def reset_pose(self) -> list[float]:
        return [*self.data.site_xpos[self._pinch].tolist(), float(self._gripper_cmd)]

    def place_scene(self, rng: np.random.Generator) -> None:
        """A (simulated) person puts the scene back: the env's own placement, drawn afresh."""
        with self._cameras_off():
            self._reset(rng, None)

    def camera_frames(self) -> dict[str, np.ndarray]:
        """What the cameras see now, as the observation shows it (camera → uint8 [H, W, 3])."""
        return self._observation()["images"]

    def disturb_scene(self, rng: np.random.Generator) -> None:
        """A scene as an episode or a failed reset may leave it: the env's placement with the cube anywhere in the
        workspace (its start region a fifth of it), then one of three drawn evenly: nothing more, the arm moved to a
        point drawn in the workspace with the gripper open or closed, or the gripper closed where it is."""
        with self._cameras_off():
            self._reset(rng, {"cube_xy": rng.uniform(self.workspace_low_m[:2], self.workspace_high_m[:2])})
            kind = int(rng.integers(3))
            if kind == 1:
                self._move_to(rng.uniform(self.workspace_low_m, self.workspace_high_m), float(rng.choice([-1, 1])))
            elif kind == 2:
                self._hold(1.0, CLOSE_STEPS)

    # --- the check ----------------------------------------------------------------------------
    def reset_problem(self, tolerance_m: float) -> str | None:
        d = self.data
        cube = d.xpos[self._cube_body]
        problems = []
        outside = self._outside_region_m()
        if outside > tolerance_m:
            where = f"at x {cube[0]:.2f}, y {cube[1]:.2f} m"  # to tell a cube out of reach from one the reset missed
            problems.append(f"the cube is {outside * 100:.1f} cm outside its start region ({where})")
        if cube[2] - self._cube_half_m > ON_TABLE_M:
            problems.append(f"the cube is not resting on the table (its centre {cube[2] * 100:.1f} cm high)")
        elif cube[2] < 0.0:  # below the table top: off its edge (what no reset of the arm's can fetch)
            problems.append(f"the cube fell off the table (its centre {-cube[2] * 100:.1f} cm below the top)")
        if self._speed(mujoco.mjtObj.mjOBJ_BODY, self._cube_body) > AT_REST_M_S:
            problems.append("the cube is moving")
        if d.qpos[self._driver_qpos] > GRIPPER_OPEN_RAD:
            problems.append("the gripper is not open")
        away = float(np.max(np.abs(d.site_xpos[self._pinch] - self.ee_start_m)))
        if away > tolerance_m:
            problems.append(f"the arm is {away * 100:.1f} cm from its home pose")
        if self._blown_up(clear=True) and problems:  # what put things there: a simulator fault, not the scene
            when = {True: "in the episode before the reset", False: "during the reset"}
            when = when.get(getattr(self, "_blown_up_before_reset", None), "since the last check")
            problems.append(f"the simulation blew up {when} and MuJoCo reset its state")
        self._blown_up_before_reset = None
        return "; ".join(problems) or None

    def _blown_up(self, clear: bool) -> bool:
        """Whether MuJoCo reset the state after a numerical blow-up since the last check (it counts one in its
        warnings after clearing them with the state, so `clear` zeroes them for the next check to see a new one)."""
        found = any(self._blow_up_counts())
        if clear:
            for w in BLOW_UP_WARNINGS:
                self.data.warning[w].number = 0
            self._blow_ups_seen = self._blow_up_counts()
        return found

    def _blow_up_counts(self) -> list[int]:
        return [int(self.data.warning[w].number) for w in BLOW_UP_WARNINGS]

    def _new_blow_up(self) -> str | None:
        """What blew up since the last step (or the episode's start), in MuJoCo's words, or None: the step that
        reads it ends the episode, since the state after it is MuJoCo's reset state, not where the episode went."""
        now, seen = self._blow_up_counts(), getattr(self, "_blow_ups_seen", None) or [0] * len(BLOW_UP_WARNINGS)
        self._blow_ups_seen = now
        new = [name for name, n, s in zip(BLOW_UP_WARNINGS.values(), now, seen, strict=True) if n > s]
        return " and ".join(new) or None

    # --- the next episode from where things are -----------------------------------------------
    def _keep_scene(self, info: dict) -> tuple[dict, dict]:
        """The episode starts from the scene the reset left: no teleport. Only a randomised cube size moves the cube,
        by the few millimetres that keep it resting on the table at its new size."""
        m, d = self.model, self.data
        z = self._cube_qpos + 2
        if abs(d.qpos[z] - self._cube_half_m) < 2 * ON_TABLE_M:
            d.qpos[z] = self._cube_half_m
        self._ee_target = d.site_xpos[self._pinch].copy()
        self._q_target = d.qpos[:7].copy()
        d.ctrl[:7] = self._q_target
        self._gripper_cmd, d.ctrl[7] = -1.0, 0.0
        mujoco.mj_forward(m, d)
        self._blow_ups_seen = self._blow_up_counts()  # one in the reset is the reset check's to name, not the episode's
        return self._observation(), info

    # --- moves --------------------------------------------------------------------------------
    def _move_to(self, target, gripper: float, max_steps: int = MOVE_MAX_STEPS) -> bool:
        """Drive the pinch point to `target` (clipped to the workspace) with the gripper commanded, through the
        task's own controller and physics; True if it got there."""
        target = np.clip(np.asarray(target, float), self.workspace_low_m, self.workspace_high_m)
        action = np.zeros(4, np.float32)
        action[3] = gripper
        for _ in range(max_steps):
            error = target - self.data.site_xpos[self._pinch]
            if np.max(np.abs(error)) < MOVE_TOLERANCE_M:
                return True
            action[:3] = np.clip(error / self.max_ee_step_m, -1.0, 1.0)
            self._step(action)
        return bool(np.max(np.abs(target - self.data.site_xpos[self._pinch])) < MOVE_TOLERANCE_M)

    def _hold(self, gripper: float, steps: int) -> None:
        for _ in range(steps):
            self._step(np.array([0.0, 0.0, 0.0, gripper], np.float32))

    def _carry_to(self, goal_xy: np.ndarray) -> bool:
        """Grasp the cube from above, carry it to `goal_xy` and set it down there; False if the grasp failed. A cube
        lying turned more than GRASP_MAX_YAW_RAD (fingers closing on its corners knock it away) is squared first."""
        if abs(_quarter_wrap(self._cube_yaw())) > GRASP_MAX_YAW_RAD:
            self._turn_to(0.0)
        cube = self.data.xpos[self._cube_body].copy()
        high = self._clear_height()
        self._move_to([cube[0], cube[1], cube[2] + APPROACH_ABOVE_M], -1.0)
        self._move_to([cube[0], cube[1], cube[2] + GRASP_ABOVE_M], -1.0)
        self._hold(1.0, CLOSE_STEPS)
        self._move_to([cube[0], cube[1], high], 1.0)
        if not self._is_grasped():
            self._hold(-1.0, CLOSE_STEPS)
            return False
        self._set_down(goal_xy)
        return True

    def _set_down(self, goal_xy: np.ndarray) -> None:
        """Carry the held cube at the travel height to `goal_xy`, set it down there, let go and rise."""
        high = self._clear_height()
        self._move_to([goal_xy[0], goal_xy[1], high], 1.0)
        self._move_to([goal_xy[0], goal_xy[1], self._cube_half_m + PLACE_ABOVE_M + GRASP_ABOVE_M], 1.0)
        self._hold(-1.0, CLOSE_STEPS)
        self._move_to([goal_xy[0], goal_xy[1], high], -1.0)

    def _turn_to(self, target: float) -> None:
        """Turn the cube where it lies to yaw `target` (a cube looks the same every quarter turn) with the closed
        gripper, which cannot turn itself: each push goes along x into a side face, TURN_OFFSET of the half-size off
        its centre towards the side that turns the cube the shorter way, and stops once the yaw read after each step
        has turned enough. Pushes come from alternate sides, so that their shifts of the cube largely cancel, the first
        from the side that shifts it towards the middle of its region. A cube still off its yaw after TURN_PUSHES
        stays as it is: the episode then starts at another yaw, which the check allows."""
        h, high = self._cube_half_m, self._clear_height()
        steps = int((TURN_STAND_OFF_M + TURN_DEPTH_M) / (TURN_SPEED * self.max_ee_step_m)) + 1
        for k in range(TURN_PUSHES):
            need = _quarter_wrap(target - self._cube_yaw())
            if abs(need) < TURN_TOLERANCE_RAD:
                return
            cube = self.data.xpos[self._cube_body]
            if k == 0:  # the first push comes from the far side of the region's centre line: it shifts the cube inwards
                side = 1.0 if cube[0] > self.cube_center_xy_m[0] else -1.0
            else:
                side = -side  # the face the push comes from
            start = [cube[0] + side * (h + TURN_STAND_OFF_M), cube[1] + side * np.sign(need) * TURN_OFFSET * h]
            self._move_to([*start, high], 1.0)
            self._move_to([*start, h], 1.0)
            push, last, turned = np.array([-side * TURN_SPEED, 0.0, 0.0, 1.0], np.float32), self._cube_yaw(), 0.0
            for _ in range(steps):
                self._step(push)
                yaw = self._cube_yaw()
                turned, last = turned + _quarter_wrap(yaw - last), yaw
                if abs(turned) >= abs(need) - TURN_TOLERANCE_RAD / 2:
                    break
            pinch = self.data.site_xpos[self._pinch].copy()
            self._move_to([pinch[0] + side * TURN_STAND_OFF_M, pinch[1], h], 1.0)  # back off the face, then rise
            self._move_to([pinch[0] + side * TURN_STAND_OFF_M, pinch[1], high], 1.0)

    def _turn_lead(self, goal_xy: np.ndarray, yaw: float) -> np.ndarray:
        """Where to set the cube down, from `goal_xy`, so that the turn to `yaw` leaves it about there: TURN_LEAD_M
        further out along x, which the first push (from the outer side: `_turn_to`) takes back. Without it every turned
        start drifted inwards and the starts' x spread shrank to 3.3 cm from the env's 5.9 (bench/pick_resets.py)."""
        if abs(_quarter_wrap(yaw)) < TURN_TOLERANCE_RAD:  # close enough to square: no push, no drift
            return np.zeros(2)
        return np.array([TURN_LEAD_M if goal_xy[0] > self.cube_center_xy_m[0] else -TURN_LEAD_M, 0.0])

    def _outside_region_m(self) -> float:
        """How far the cube lies outside its start region (x or y, m; 0 or less: inside)."""
        cube = self.data.xpos[self._cube_body]
        return float(np.max(np.abs(cube[:2] - self.cube_center_xy_m) - self.cube_xy_range_m))

    def _cube_yaw(self) -> float:
        rot = self.data.xmat[self._cube_body]
        return float(np.arctan2(rot[3], rot[0]))  # about world z, from the cube's x-axis (as the observation reads it)

    def _go_home(self) -> None:
        self._move_to([*self.ee_start_m[:2], self._clear_height()], -1.0)
        self._move_to(self.ee_start_m, -1.0)
        self._settle()

    def _settle(self) -> None:
        """Hold still, gripper open, until the cube and the arm are at rest (or the allowance is spent)."""
        for _ in range(SETTLE_MAX_STEPS):
            if (
                self._speed(mujoco.mjtObj.mjOBJ_BODY, self._cube_body) < AT_REST_M_S
                and self._speed(mujoco.mjtObj.mjOBJ_SITE, self._pinch) < AT_REST_M_S
                and self.data.qpos[self._driver_qpos] < GRIPPER_OPEN_RAD
            ):
                return
            self._hold(-1.0, 1)

    # --- the scene ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _reset_reach(self):
        """The workspace box widened by RESET_REACH_MARGIN_M in x and y while the reset moves (restored after)."""
        low, high = self.workspace_low_m.copy(), self.workspace_high_m.copy()
        margin = np.array([RESET_REACH_MARGIN_M, RESET_REACH_MARGIN_M, 0.0])
        self.workspace_low_m, self.workspace_high_m = low - margin, high + margin
        try:
            yield
        finally:
            self.workspace_low_m, self.workspace_high_m = low, high
            self._ee_target = np.clip(self._ee_target, low, high)

    @contextlib.contextmanager
    def _cameras_off(self):
        """No step renders a frame inside: nobody looks at a move's frames, and one costs tens of control steps."""
        names, self.camera_names = self.camera_names, ()
        try:
            yield
        finally:
            self.camera_names = names

    def _clear_height(self) -> float:
        return float(min(CARRY_HEIGHT_M, self.workspace_high_m[2]))

    def _cube_reachable(self) -> bool:
        """On the table and under the workspace (a cube on the floor, or out of the box, needs a person)."""
        cube = self.data.xpos[self._cube_body]
        inside = np.all(cube[:2] >= self.workspace_low_m[:2]) and np.all(cube[:2] <= self.workspace_high_m[:2])
        return bool(inside and cube[2] > 0.0)

    def _draw_start_xy(self) -> np.ndarray:
        """Where the cube is put down: a point drawn in its start region (the next episode's random start)."""
        inner = np.maximum(self.cube_xy_range_m - PLACE_MARGIN_M, 0.0)
        return self.cube_center_xy_m + self.np_random.uniform(-1, 1, 2) * inner

    def _speed(self, kind, index: int) -> float:
        velocity = np.empty(6)
        mujoco.mj_objectVelocity(self.model, self.data, kind, index, velocity, 0)
        return float(np.linalg.norm(velocity[3:]))


def _quarter_wrap(angle: float) -> float:
    """`angle` as the shorter turn to the same-looking cube pose: in [-pi/4, pi/4)."""
    return float((angle + np.pi / 4) % (np.pi / 2) - np.pi / 4)
