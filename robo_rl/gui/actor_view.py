"""What the actor tells the GUI: its mode, the episode, the frames the policy sees, the learner's health.

The actor calls `step()` after each env step, `tick()` while paused, `new_episode()` after a reset and `close()` at
the end; all of it runs in the control loop, so it only reads what the actor already has and leaves the socket to the
bridge's thread (`robo_rl.gui.bridge`).

With a learned reward each tick carries its threshold, debounce, model version and the marks saved; the page's
threshold and marks come back through `_check` (on the bridge's thread): a threshold goes to the RewardWrapper, which
applies it between steps, a mark saves the wrapper's recent frames into the run folder (robo_rl/rewards/live.py).
With `env.reset_mode` each tick carries the reset state: running, resetting (the episode ended, the reset runs),
checking (the reset is done, its check runs), waiting (for a person, and why), from the ResetWrapper's counts.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from robo_rl.configs.gui import AUTO_VIEW_SIZE
from robo_rl.gui.bridge import GuiBridge
from robo_rl.transport.security import curve_keys, is_loopback

log = logging.getLogger(__name__)

VIEW_LOOP_SHARE = 0.25  # the view takes at most this share of the control loop's time: under load it comes slower
LEARNER_FIELDS = (
    "env_steps",
    "updates",
    "updates_per_s",
    "realised_utd",
    "staleness_versions",
    "actors_alive",
    "buffer_online",
    "buffer_prior",
    "buffer_interventions",
)


# the control loop's figures the page shows: its period and jitter, and a chunked policy's inference, the delay it
# compensates, the steps it waited and its chunk switches (policies/chunking.py)
LOOP_FIGURES = (
    "period_ms_p50",
    "jitter_ms_p99",
    "late_decide_ms",  # where the slowest 1% of periods went (robo_rl/loop_timing.py late_period_parts)
    "late_env_ms",
    "late_env_cpu_ms",
    "late_woke_late_ms",
    "chunking",
    "chunk_inference_ms_p99",
    "chunk_delay_steps",
    "chunk_waits",
    "chunk_switches",
)


class ActorView:
    def __init__(self, actor, web) -> None:
        g = actor.cfg.gui
        curve = None if is_loopback(g.zmq_host) else curve_keys(actor.cfg, actor.cfg.actor.id)
        self.actor = actor
        self.bridge = GuiBridge(
            actor.cfg.actor.id,
            g.zmq_host,
            g.zmq_port,
            web,
            actor.human,
            frame_hz=g.frame_hz,
            deadman=deadman_for(g.deadman, actor.env),
            deadman_timeout_s=g.deadman_timeout_s,
            curve=curve,
            on_check=self._check,
            idle_meta=self._idle_meta,
        )
        self.view_size = view_size_for(g.view_size, actor.env)
        self._view_next, self._views = 0.0, 0  # when the next view may be rendered (VIEW_LOOP_SHARE); how many so far
        self.episode, self.t, self.ret, self.reward = 0, 0, 0.0, 0.0
        self.intervention_steps, self.controller, self.reported = 0, None, False
        self.success_prob: float | None = None
        self.notice: str | None = None
        self._loop: dict = {}
        self._loop_at = 0.0
        self._last_meta: dict | None = None  # what the bridge repeats while the loop is held up (a reset)
        self._resetting, self._resets_before = False, 0
        self.run_dir = actor.cfg.run_dir or actor.cfg.resume
        self.marks = actor.reward.marks_in(self.run_dir) if self.run_dir and actor.reward is not None else 0

    def step(self, obs: dict, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        self.t += 1
        self.reward, self.ret = float(reward), self.ret + float(reward)
        self.controller = info.get("intervention_device") if info.get("intervention") else None
        self.intervention_steps += bool(info.get("intervention"))
        prob = info.get("success_prob")
        self.success_prob = None if prob is None else float(prob)
        self.notice = (
            "learned reward: no fresh score (the model is down or slow): the fallback reward"
            if info.get("reward_fallback")
            else None
        )
        if (terminated or truncated) and self.actor.resets:  # the actor resets next: the page says so meanwhile
            self._resetting, self._resets_before = True, self.actor.resets[0].counts["resets"]
        self.tick(obs)
        if terminated or truncated:
            ended_by = info.get("ended_by") or ("terminated" if terminated else "truncated")
            self._episode_end(bool(info.get("success", False)), str(ended_by))

    def new_episode(self, episode: int, obs: dict) -> None:
        if not self.reported and self.t > 0:  # ended without an env step saying so (a refused action)
            self._episode_end(False, "safety")
        self.episode, self.t, self.ret, self.reward = episode, 0, 0.0, 0.0
        self.intervention_steps, self.controller, self.reported = 0, None, False
        self._resetting = False
        self.tick(obs)

    def tick(self, obs: dict | None) -> None:
        human, safety = self.actor.human, self.actor.safety
        if human is not None and human.estopped:
            mode = "ESTOP"
        elif safety is not None and safety.stopped:
            mode = "SAFETY"
        elif human is not None and human.paused:
            mode = "PAUSED"
        else:
            mode = "HUMAN" if self.controller else "POLICY"
        meta = {
            "mode": mode,
            "controller": self.controller,
            "policy_version": int(self.actor.policy_version),
            "policy_age_s": time.monotonic() - self.actor.policy_since,
            "episode": int(self.episode),
            "step": int(self.t),
            "reward": self.reward,
            "return": self.ret,
            "success_prob": self.success_prob,
            "interventions": human.timeline if human is not None else [],
            "loop": self._loop_stats(),
            "learner": self._learner(),
            "notice": self.notice,
        }
        if safety is not None:
            meta.update(safety=_safety_line(safety), safety_counts=safety.stats())
        reward = self.actor.reward
        if reward is not None:
            meta.update(
                reward_threshold=reward.threshold,
                reward_debounce_k=int(reward.shaper.config.debounce_k),
                reward_model_version=reward.model_version,
                reward_marks=self.marks,
            )
        meta.update(self._reset_fields())
        self._last_meta = meta
        images = view = None
        if obs is not None and self.bridge.wants_frame():
            images = obs.get("images") or {}
            view = self._render()
        self.bridge.tick(meta, images, view)

    def _reset_fields(self) -> dict:
        if not self.actor.resets:
            return {}
        resets = self.actor.resets[0]  # the page's actor steps one env
        counts = resets.stats()
        why = counts.pop("reset_waiting_why", None)
        if resets.waiting_for_person:
            state = "waiting"
        elif self._resetting:
            state = "checking" if resets.counts["resets"] > self._resets_before else "resetting"
        else:
            state = "running"
        return {"reset_state": state, "reset_why": why, "reset_counts": counts}

    def _idle_meta(self) -> dict | None:
        """On the bridge's thread, while the loop is held up: the last state with the reset's progress now."""
        meta = self._last_meta
        return None if meta is None else {**meta, **self._reset_fields()}

    def _check(self, kind: str, meta: dict) -> None:
        """On the bridge's thread: the page's threshold or mark; ValueError (the bridge logs it) when refused."""
        reward, by = self.actor.reward, meta.get("by", "?")
        if reward is None:
            raise ValueError(
                f"{self.actor.cfg.actor.id} has no learned reward (reward=model): nothing to adjust or mark"
            )
        if kind == "gui_reward_threshold":
            reward.request_threshold(meta["threshold"], by)
            return
        if not self.run_dir:
            raise ValueError("a mark is saved in the run folder, and this actor has none (run_dir)")
        info = {"episode": int(self.episode), "step": int(self.t), "by": by}
        path, n = reward.save_mark(self.run_dir, self.actor.cfg.actor.id, meta["label"], info)
        self.marks += 1
        log.info("reward mark %s by %s: %d frames saved to %s", meta["label"], by, n, path)

    def close(self, obs: dict | None) -> None:
        self.tick(obs)  # the last word: e-stopped, or stopped
        self.bridge.close()

    def _episode_end(self, success: bool, ended_by: str) -> None:
        self.reported = True
        self.bridge.episode_end(
            {
                "episode": int(self.episode),
                "success": success,
                "ended_by": ended_by,
                "length": int(self.t),
                "return": self.ret,
                "intervention_steps": int(self.intervention_steps),
            }
        )

    def _render(self) -> dict | None:
        """The larger view, rendered in the control loop: only while a page watches, and no more often than keeps
        its cost under VIEW_LOOP_SHARE of the loop's time."""
        start = time.monotonic()
        if self.view_size <= 0 or not self.bridge.watched or start < self._view_next:
            return None
        try:
            frame = self.actor.env.unwrapped.render(size=self.view_size)
        except Exception as e:  # noqa: BLE001 - an env without a sized render: no larger view, said once
            log.warning("gui: no larger view (%s: %s); gui.view_size=0 turns it off", type(e).__name__, e)
            self.view_size = 0
            return None
        if self._views:  # the first render also builds the renderer: not what a frame costs
            self._view_next = start + (time.monotonic() - start) / VIEW_LOOP_SHARE
        self._views += 1
        return {"view": np.asarray(frame, np.uint8)}

    def _loop_stats(self) -> dict:
        now = time.monotonic()
        if now - self._loop_at > 1.0:  # percentiles over the recent steps: once a second is plenty
            stats = self.actor.loop_stats()
            self._loop = {k: stats[k] for k in LOOP_FIGURES if k in stats}
            self._loop_at = now
        return self._loop

    def _learner(self) -> dict:
        status = self.actor.transport.status or {}
        return {k: status[k] for k in LEARNER_FIELDS if isinstance(status.get(k), int | float)}


def deadman_for(setting: str | None, env) -> str:
    """The dead-man policy: the setting where given; else `pause` on a robot (it must not move unwatched) and
    `continue` in simulation (a closed tab should not stop a run)."""
    if setting is not None:
        return setting
    return "pause" if env.unwrapped.drives_robot else "continue"


def view_size_for(setting: int | None, env) -> int:
    """The larger view's side in pixels (0: none): the setting where given; else, in simulation with no camera in the
    observation, `AUTO_VIEW_SIZE` (a person asked to take over must see the robot); a robot shows its cameras."""
    if setting is not None:
        return int(setting)
    cameras = env.observation_space["images"].spaces
    return 0 if env.unwrapped.drives_robot or cameras else AUTO_VIEW_SIZE


def _safety_line(safety) -> str | None:
    """What the operator reads: why the arm is stopped, else what the safety layer did on the last step."""
    if safety.stopped:
        return f"STOPPED: {safety.stopped}: check the arm, then Acknowledge"[:300]
    if safety.last:
        return ("last step: " + ", ".join(f"{k} {v}" for k, v in safety.last.items()))[:300]
    return None
