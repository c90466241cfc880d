"""`RewardShaper`: the only place learned-reward-model outputs (`Scores`) become RL rewards and dones.

reward = clip(shaping_scale * (gamma * Φ(s') - Φ(s)), ±clip) + success_bonus on the step success is declared.

* Potential-based shaping (Ng, Harada & Russell 1999) leaves the optimal policy unchanged, so a progress model that
  is wrong in places biases learning less than a raw "reward = progress", and a trajectory that goes up and down
  earns (close to) nothing. Φ is the model's progress; with only deltas, their running sum (each partial sum clipped
  to [0, 1]); with only a success probability, that probability. Φ(s0) is taken from the reset frame's scores.
* Debounced success: a false positive would end an episode early and teach the policy to stop, so success needs
  `debounce_k` consecutive steps with success_prob >= success_threshold. A human label overrides the simulator's
  ground truth (when `use_sim_success`), which overrides the model. The bonus is paid once per episode.
* Stagnation and regression end an episode as truncated (not terminated: the task is not over, bootstrapping stays
  valid). The env reward is never added: it is returned beside the shaped one (`raw_reward`) for later relabelling.

The actor calls `step` once per env step (pure numpy, cheap); the learner relabels stored episodes with `episode`,
which runs the very same `step`s, so both give identical results for the same inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robo_rl.configs.wrappers import ShaperConfig
from robo_rl.rewards.base import OUTPUTS, Scores

REASONS = (None, "model_success", "sim_success", "human_success", "human_failure", "stagnation", "regression")
HUMAN_LABELS = {"success": True, "human_success": True, "failure": False, "human_failure": False}
_TOL = 1e-9  # float slack for the stagnation / regression comparisons


@dataclass
class ShapedStep:
    reward: float  # shaping + bonus: what the RL algorithm learns from
    terminated: bool  # the task is over (success, or a human's failure label)
    truncated: bool  # cut short (stagnation / regression); bootstrap from the next state
    success: bool  # success was declared on this step (the bonus is in `reward`)
    reason: str | None  # one of REASONS
    raw_reward: float  # the env's reward, unchanged
    potential: float  # Φ of this step's state
    shaping: float  # the (scaled, clipped) shaping term
    success_prob: float | None  # the model's, when it gives one


def _finite(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name} is {value}: the reward model gave a non-finite output")
    return value


def _read(scores: Scores | dict) -> dict[str, float]:
    """One step's outputs as floats (absent ones left out)."""
    if isinstance(scores, Scores):
        raw = {name: getattr(scores, name) for name in OUTPUTS}
    elif isinstance(scores, dict):
        unknown = set(scores) - set(OUTPUTS) - {"extra"}
        if unknown:
            raise ValueError(f"unknown score outputs {sorted(unknown)} (expected some of {', '.join(OUTPUTS)})")
        raw = {name: scores.get(name) for name in OUTPUTS}
    else:
        raise TypeError(f"scores must be a Scores or a dict, got {type(scores).__name__}")
    out = {}
    for name, value in raw.items():
        if value is not None:
            a = np.asarray(value, dtype=np.float64).reshape(-1)
            if a.size != 1:
                raise ValueError(f"{name}: one step's scores hold {a.size} values, expected 1")
            out[name] = float(a[0])
    if not out:
        raise ValueError(f"scores hold none of {', '.join(OUTPUTS)}")
    return out


class RewardShaper:
    """Per-episode state: Φ of the last state, its best, the stagnation and debounce counts. `reset` per episode."""

    def __init__(self, config: ShaperConfig | dict | None = None) -> None:
        if config is None or isinstance(config, dict):
            config = ShaperConfig.from_dict(config or {})
        self.config = config
        self.reset()

    def reset(self, first: Scores | dict | None = None) -> None:
        """A new episode; `first`: the reset frame's scores (its Φ is Φ(s0)); None: Φ(s0) = 0."""
        self.potential = 0.0 if first is None else self._potential(_read(first), 0.0)
        self._best = self._reference = self.potential
        self._positives = self._stalled = 0
        self._succeeded = self._done = False

    @staticmethod
    def _potential(s: dict[str, float], previous: float) -> float:
        if "progress" in s:
            return float(np.clip(_finite("progress", s["progress"]), 0.0, 1.0))
        if "delta" in s:
            return float(np.clip(previous + _finite("delta", s["delta"]), 0.0, 1.0))
        return float(np.clip(_finite("success_prob", s["success_prob"]), 0.0, 1.0))

    def step(
        self, scores: Scores | dict, env_reward: float, env_success: bool = False, human_label: str | None = None
    ) -> ShapedStep:
        if self._done:
            raise RuntimeError("the episode has ended; call reset() before the next step")
        c = self.config
        if human_label is not None and human_label not in HUMAN_LABELS:
            raise ValueError(f"unknown human label {human_label!r} (one of {', '.join(HUMAN_LABELS)})")
        s = _read(scores)
        prob = _finite("success_prob", s["success_prob"]) if "success_prob" in s else None
        phi = self._potential(s, self.potential)
        shaping = float(np.clip(c.shaping_scale * (c.gamma * phi - self.potential), -c.clip, c.clip))
        self.potential = phi
        self._positives = self._positives + 1 if prob is not None and prob >= c.success_threshold else 0
        if phi - self._reference > c.stagnation_eps + _TOL:
            self._reference, self._stalled = phi, 0
        else:
            self._stalled += 1
        self._best = max(self._best, phi)

        success = terminated = truncated = False
        reason = None
        if human_label is not None:  # a human > the simulator's ground truth > the model
            success, terminated = HUMAN_LABELS[human_label] and not self._succeeded, True
            reason = "human_success" if HUMAN_LABELS[human_label] else "human_failure"
        elif not self._succeeded and (env_success if c.use_sim_success else self._positives >= c.debounce_k):
            success, terminated = True, c.terminate_on_success
            reason = "sim_success" if c.use_sim_success else "model_success"
        if not terminated:
            if c.regression_drop > 0 and self._best - phi >= c.regression_drop - _TOL:
                truncated, reason = True, "regression"
            elif c.stagnation_steps > 0 and self._stalled >= c.stagnation_steps:
                truncated, reason = True, "stagnation"
        self._succeeded |= success
        self._done = terminated or truncated
        return ShapedStep(
            reward=shaping + (c.success_bonus if success else 0.0),
            terminated=terminated,
            truncated=truncated,
            success=success,
            reason=reason,
            raw_reward=float(env_reward),
            potential=phi,
            shaping=shaping,
            success_prob=prob,
        )

    def episode(
        self,
        scores_per_step: Scores | dict,
        env_rewards,
        env_success=None,
        human_labels=None,
        first: Scores | dict | None = None,
    ) -> dict[str, np.ndarray]:
        """A whole stored episode (relabelling), by the same `step`s on a fresh shaper (this one's episode is left
        alone). Step t's scores are those of the state after action t; `first` those of the reset state. Arrays of T:
        reward, shaping, potential, success_prob (NaN where none), terminated, truncated, success, reason (codes
        into REASONS, 0: none), raw_reward (always the env's), and `valid`: False after the first done, where
        reward / shaping / potential are 0 and the flags False."""
        columns = {
            name: getattr(scores_per_step, name) if isinstance(scores_per_step, Scores) else scores_per_step.get(name)
            for name in OUTPUTS
        }
        columns = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in columns.items() if v is not None}
        raw = np.asarray(env_rewards, dtype=np.float64).reshape(-1)
        n = len(raw)
        env_success = np.zeros(n, bool) if env_success is None else np.asarray(env_success, bool).reshape(-1)
        human_labels = [None] * n if human_labels is None else list(human_labels)
        lengths = {k: len(v) for k, v in columns.items()} | {
            "env_success": len(env_success),
            "human_labels": len(human_labels),
        }
        if any(length != n for length in lengths.values()):
            raise ValueError(f"episode inputs differ in length: env_rewards {n}, {lengths}")
        out = {k: np.zeros(n) for k in ("reward", "shaping", "potential")}
        out |= {k: np.zeros(n, bool) for k in ("terminated", "truncated", "success", "valid")}
        out |= {"reason": np.zeros(n, np.int8), "raw_reward": raw.copy(), "success_prob": np.full(n, np.nan)}
        shaper = RewardShaper(self.config)
        shaper.reset(first)
        for t in range(n):
            r = shaper.step({k: v[t] for k, v in columns.items()}, raw[t], bool(env_success[t]), human_labels[t])
            for key in ("reward", "shaping", "potential", "terminated", "truncated", "success"):
                out[key][t] = getattr(r, key)
            out["valid"][t], out["reason"][t] = True, REASONS.index(r.reason)
            if r.success_prob is not None:
                out["success_prob"][t] = r.success_prob
            if r.terminated or r.truncated:
                break
        return out
