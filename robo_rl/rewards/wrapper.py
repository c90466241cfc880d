"""Learned rewards on the actor: a wrapper that scores the cameras with a reward model and lets `RewardShaper` turn
the scores into the step's reward and done, without ever making the control loop wait for the model.

`model` is a saved model folder, or `tcp://host:port` for one served by `robo-rl critic serve` (remote.py). With
`asynchronous` (the default) a worker thread scores the newest frames (every `every` steps); a step takes the
newest score no older than `max_staleness_steps`, otherwise the fallback (`env`: the env's own reward; `zero`: no
reward) for that step, counted. The env's own reward is kept beside the shaped one in every record
(`extra/reward_env`), with the success probability (`extra/success_prob`, −1 where none), so a run can be relabelled
with another model later; `info["success_prob"]` feeds the GUI. The env's own `terminated` (a simulator's success
check) is ignored unless `env_terminates`: the model decides when the task is done, as on a robot. Human labels (the
intervention wrapper, inside this one: `actor.wrappers: [human, reward]`) take precedence over the model.

Checked live (robo_rl/rewards/live.py, the page): `request_threshold` and `request_model` may be called from any
thread and take effect between two steps (logged, counted in `stats()`); every record says which model version scored
it (`extra/reward_model_version`, 0: the model the run started with); `recent_frames()` are the frames a person's mark
labels.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from robo_rl.configs.wrappers import FALLBACKS, RewardConfig
from robo_rl.envs.base import RobotWrapper
from robo_rl.rewards.base import RewardModel, Scores, Task, load_model, shaper_settings
from robo_rl.rewards.live import MARK_FRAMES, ModelWatcher, mark_files, save_mark
from robo_rl.rewards.shaper import RewardShaper

log = logging.getLogger(__name__)

EXTRAS = {"reward_env": ((), np.float32), "success_prob": ((), np.float32), "reward_model_version": ((), np.int32)}
REWARD = RewardConfig()  # the `reward` block's defaults (robo_rl/configs/wrappers.py), for wrappers built in Python
ENDED_BY = {"model_success": "reward_success", "stagnation": "reward_stalled", "regression": "reward_stalled"}


class RewardWrapper(RobotWrapper):
    @classmethod
    def record_extras_from_config(cls, **_) -> dict:
        return dict(EXTRAS)

    def __init__(
        self,
        env: gym.Env,
        model: str | RewardModel,
        instruction: str | None = REWARD.instruction,
        every: int = REWARD.every,
        asynchronous: bool = REWARD.asynchronous,
        max_staleness_steps: int = REWARD.max_staleness_steps,
        fallback: str = REWARD.fallback,
        env_terminates: bool = REWARD.env_terminates,
        shaper: dict | None = None,
        model_target: str | None = REWARD.model_target,
        cameras: list[str] | None = REWARD.cameras,
        timeout_s: float = REWARD.timeout_s,
        curve_keys_dir: str | None = REWARD.curve_keys_dir,
        key_name: str = REWARD.key_name,
        kind: str | None = REWARD.kind,  # what a run config saved before `model_target` names the model class by
    ) -> None:
        super().__init__(env)
        if fallback not in FALLBACKS:
            raise ValueError(f"reward.fallback='{fallback}': one of {', '.join(FALLBACKS)}")
        if isinstance(model, RewardModel):
            self.model = model
        elif str(model).startswith("tcp://"):  # served by `robo-rl critic serve` on another machine
            from robo_rl.rewards.remote import RemoteRewardModel
            from robo_rl.transport.security import CurveKeys

            curve = CurveKeys.load(curve_keys_dir, key_name) if curve_keys_dir else None
            self.model = RemoteRewardModel(str(model), tuple(cameras or ()), timeout_s, curve)
        else:
            self.model = load_model(model, model_target or kind)
        cams = set(getattr(env.unwrapped, "camera_names", ()) or env.observation_space["images"].spaces)
        missing = [c for c in self.model.cameras if c not in cams]
        if missing:
            raise ValueError(f"the reward model scores cameras {list(self.model.cameras)}; this env has no {missing}")
        self.task = Task(instruction if instruction is not None else getattr(env.unwrapped, "task_description", ""))
        self.every, self.max_stale, self.fallback = max(1, int(every)), int(max_staleness_steps), fallback
        self.env_terminates = env_terminates
        self.shaper = RewardShaper(shaper_settings(shaper, self.model))
        self._own_threshold = (shaper or {}).get("success_threshold") is not None  # a swapped model keeps it
        self._scorer: tuple[RewardModel, int] = (self.model, 0)  # the model that scores now, and its version
        self._requests: dict = {}  # from other threads (the page, the model watcher), applied between steps
        self._recent: collections.deque = collections.deque(maxlen=MARK_FRAMES)  # what a person's mark labels
        self.watcher: ModelWatcher | None = None
        self.threshold_changed_at: float | None = None
        self.asynchronous = asynchronous
        self.counts: collections.Counter = collections.Counter()
        self.score_ms: collections.deque = collections.deque(maxlen=1000)
        self._t = 0
        self._latest: tuple[int, int, Scores, int] | None = None  # (episode, step it scored, scores, model version)
        self._episode = 0
        self._job: tuple | None = None
        self._cv = threading.Condition()
        self._stop = False
        self._worker_thread = None
        if asynchronous:
            self._worker_thread = threading.Thread(target=self._worker, name="reward-model", daemon=True)
            self._worker_thread.start()

    @property
    def record_extras(self) -> dict:
        return {**(getattr(self.env, "record_extras", None) or {}), **EXTRAS}

    # --- scoring ----------------------------------------------------------------------------------------------
    def _frames(self, obs: dict) -> dict[str, np.ndarray]:
        return {c: np.asarray(obs["images"][c])[None] for c in self.model.cameras}

    def _score_now(self, frames: dict) -> tuple[Scores, int]:
        model, version = self._scorer
        start = time.perf_counter()
        scores = model.score(frames, self.task)
        self.score_ms.append((time.perf_counter() - start) * 1e3)
        return scores, version

    def _submit(self, obs: dict) -> None:
        frames = {c: f.copy() for c, f in self._frames(obs).items()}
        if not self.asynchronous:
            self._latest = (self._episode, self._t, *self._score_now(frames))
            return
        with self._cv:
            if self._job is not None:
                self.counts["scores_skipped"] += 1  # the model is slower than `every` steps: the newest frame wins
            self._job = (self._episode, self._t, frames)
            self._cv.notify()

    def _worker(self) -> None:
        while True:
            with self._cv:
                while self._job is None and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                episode, t, frames = self._job
                self._job = None
            try:
                scores, version = self._score_now(frames)
            except Exception as e:  # noqa: BLE001 - a failing model: the fallback carries on, said and counted
                self.counts["score_errors"] += 1
                if self.counts["score_errors"] == 1:
                    log.error(
                        "the reward model failed (%s); steps use the fallback (reward.fallback=%s)", e, self.fallback
                    )
                continue
            self._latest = (episode, t, scores, version)

    def _fresh(self) -> tuple[Scores | None, int]:
        """The newest score fresh enough to use and the version that made it; (None, the current version) if none."""
        latest = self._latest
        if latest is None or latest[0] != self._episode or self._t - latest[1] > self.max_stale:
            return None, self._scorer[1]
        return latest[2], latest[3]

    # --- live checks: a threshold or a model from another thread, applied between steps ---------------------------
    @property
    def threshold(self) -> float:
        return float(self.shaper.config.success_threshold)

    @property
    def model_version(self) -> int:
        return self._scorer[1]

    def request_threshold(self, value: float, by: str = "?") -> None:
        """Use `value` as the success threshold from the next step; ValueError (one line) outside (0, 1)."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value < 1.0:
            raise ValueError(f"reward threshold {value!r} is out of range: a success probability in (0, 1)")
        self._requests["threshold"] = (float(value), by)

    def request_model(self, model: RewardModel, version: int) -> None:
        """Score with `model` (version `version`) from the next step on."""
        self._requests["model"] = (model, int(version))

    def watch_run(self, run_dir: str | Path) -> None:
        """Swap in each newer model version `robo-rl reward retrain` publishes in the run folder (a served critic is
        not swapped: its server owns its model)."""
        if self.watcher is None and not type(self.model).__name__.startswith("Remote"):
            self.watcher = ModelWatcher(run_dir, self.request_model, self.model.cameras)

    def _apply_requests(self) -> None:
        model = self._requests.pop("model", None)
        if model is not None:
            (new, version), old = model, self._scorer[1]
            self._scorer, self.model = (new, version), new
            self.counts["model_swaps"] += 1
            if not self._own_threshold and getattr(new, "threshold", None) is not None:
                self.shaper.config.success_threshold = float(new.threshold)  # chosen for that model
            log.info("reward model: v%d swapped in for v%d at episode %d step %d", version, old, self._episode, self._t)
        threshold = self._requests.pop("threshold", None)
        if threshold is not None:
            (value, by), old = threshold, self.threshold
            self.shaper.config.success_threshold, self._own_threshold = value, True
            self.counts["threshold_changes"] += 1
            self.threshold_changed_at = time.time()
            log.info(
                "reward threshold %.3f -> %.3f (by %s) at episode %d step %d", old, value, by, self._episode, self._t
            )

    def recent_frames(self) -> dict[str, np.ndarray]:
        """The model cameras' last MARK_FRAMES frames, oldest first (from any thread: a copy)."""
        for _ in range(5):
            try:
                recent = list(self._recent)
                break
            except RuntimeError:  # the control loop appended while we copied
                continue
        else:
            recent = []
        return {c: np.stack([f[c] for f in recent]) for c in self.model.cameras} if recent else {}

    def save_mark(self, run_dir: str | Path, actor: str, label: str, meta: dict) -> tuple[Path, int]:
        """A person's mark on the recent frames, saved into the run (robo_rl/rewards/live.py); (file, frames)."""
        frames = self.recent_frames()
        if not frames:
            raise ValueError("no frames scored yet in this run: nothing to mark")
        info = {**meta, "model_version": self.model_version, "threshold": self.threshold}
        return save_mark(run_dir, actor, label, frames, info), len(next(iter(frames.values())))

    @staticmethod
    def marks_in(run_dir: str | Path) -> int:
        return len(mark_files(run_dir))

    # --- gymnasium ----------------------------------------------------------------------------------------------
    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._episode += 1
        self._t = 0
        self._apply_requests()
        first = version = None
        try:
            first, version = self._score_now(self._frames(obs))  # Φ(s0): once per episode, before the first action
        except Exception as e:  # noqa: BLE001 - as in the worker
            self.counts["score_errors"] += 1
            log.error("the reward model failed on the reset frame (%s); Φ(s0) = 0", e)
        self.shaper.reset(first)
        self._latest = None if first is None else (self._episode, 0, first, version)
        return obs, info

    def step(self, action):
        self._apply_requests()
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        self._recent.append({c: np.array(obs["images"][c]) for c in self.model.cameras})
        if self._t % self.every == 0:
            self._submit(obs)
        scores, version = self._fresh()
        label = info.get("ended_by") if str(info.get("ended_by", "")).startswith("human_") else None
        label = label if label in ("human_success", "human_failure") else None
        if scores is None and label is None:
            self.counts["fallback_steps"] += 1
            shaped_reward = float(env_reward) if self.fallback == "env" else 0.0
            prob = -1.0
            done_by_model = (False, False, None)
        else:
            shaped = self.shaper.step(
                scores if scores is not None else {"progress": self.shaper.potential},
                float(env_reward),
                bool(info.get("success", False)),
                label,
            )
            shaped_reward, prob = shaped.reward, -1.0 if shaped.success_prob is None else shaped.success_prob
            done_by_model = (shaped.terminated, shaped.truncated, shaped.reason)
        self.counts["steps"] += 1
        env_done = terminated and (self.env_terminates or label is not None)
        model_term, model_trunc, reason = done_by_model
        # the env's success ignored at its time limit: the env did not say truncated (it said terminated), and an
        # episode that went on past it would run on (Meta-World's own env raises at 500 steps)
        truncated = truncated or (terminated and not env_done and bool(info.get("time_limit_reached", False)))
        terminated = bool(env_done or model_term)
        truncated = bool((truncated or model_trunc) and not terminated)
        if not env_done and info.get("ended_by") == "env":  # the simulator's own success check, ignored
            info["ended_by"] = None
        if (model_term or model_trunc) and label is None:
            info["ended_by"] = ENDED_BY[reason]
        if not (terminated or truncated):
            info["ended_by"] = None
        elif info.get("ended_by") is None:
            info["ended_by"] = "time_limit"
        info["record_extras"] = {
            **info.get("record_extras", {}),
            "reward_env": float(env_reward),
            "success_prob": float(prob),
            "reward_model_version": int(version),
        }
        info["success_prob"] = None if prob < 0 else float(prob)
        info["reward_fallback"] = scores is None and label is None  # no fresh score: the GUI and the metrics say so
        return obs, float(shaped_reward), terminated, truncated, info

    def stats(self) -> dict:
        out = {f"reward_{k}": int(v) for k, v in self.counts.items()}
        out.update(reward_threshold=self.threshold, reward_model_version=self.model_version)
        if self.threshold_changed_at is not None:
            out["reward_threshold_changed_at"] = self.threshold_changed_at  # unix time of the newest change
        if self.score_ms:
            p50, p99 = np.percentile(np.array(self.score_ms), [50, 99])
            out.update(reward_score_ms_p50=float(p50), reward_score_ms_p99=float(p99))
        return out

    def close(self):
        if self.watcher is not None:
            self.watcher.close()
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._worker_thread is not None:
            self._worker_thread.join(max(1.0, 4 * self.max_stale))  # the model's socket is closed after its last use
        close_model = getattr(self.model, "close", None)
        if close_model is not None:
            close_model()
        return self.env.close()
