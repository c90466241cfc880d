"""Checks that a run measures something, run by the learner beside the algorithm (settings: the `guards` block).

Each guard trips at most once a run: it is logged as a metric (`guard_<name>`: 0, then 1 from then on), warned once
with its figures, and written to metrics.jsonl as a `{"kind": "guard"}` record, which the run's evaluation report
repeats. PPO's own guards (the recorded log-probabilities, the ratio and KL before backward()) act inside
`robo_rl/algos/ppo.py`; the minibatches they skip reach this module through PPO's metrics.

  q_range           a critic's mean Q outside the discounted return's possible range, widened by a margin:
                    per-step rewards in [r_min, r_max] (the demonstrations' and every online step's) bound it by
                    [min(r_min, r_min/(1-γ)), max(r_max, r_max/(1-γ))], SAC's entropy bonus α·H per step added; a
                    time-limit cut bootstraps, so the infinite horizon is the bound, not the episode's length
  unmoved_actor     an actor that never leaves its base over the last N actor updates: a residual's mean
                    |action − base action| below ε, or a DSRL noise actor whose weights moved less than ε (relative)
                    from where the run's first update found them (its base's prior is where it starts)
  reward_disagrees  a learned reward whose success (p ≥ 0.5 at some step of the episode) differs from the
                    simulator's on more than a share of the last N episodes that recorded both
  no_success        no successful online episode among the first N
  ppo_skipped       PPO skipped a minibatch before backward() (a ratio past algo.skip_log_ratio, a KL past target_kl)
"""

from __future__ import annotations

import collections
import logging
import math
from pathlib import Path

import numpy as np

from robo_rl.configs.run import GuardsConfig
from robo_rl.configs.wrappers import EVEN_ODDS
from robo_rl.runs import read_metrics

GUARDS = ("q_range", "unmoved_actor", "reward_disagrees", "no_success", "ppo_skipped")

log = logging.getLogger(__name__)


def return_range(r_min: float, r_max: float, gamma: float, bonus: float = 0.0) -> tuple[float, float]:
    """The discounted return's possible range for per-step rewards in [r_min, r_max], each step's `bonus` (SAC's
    α·H, which its targets add) included; unbounded for γ = 1."""
    if gamma >= 1:
        return -math.inf, math.inf
    horizon = 1.0 / (1.0 - gamma)
    low, high = r_min + min(bonus, 0.0), r_max + max(bonus, 0.0)
    return min(low, low * horizon), max(high, high * horizon)


def q_out_of_range(q: float, low: float, high: float, margin: float) -> bool:
    """Whether `q` is further outside [low, high] than `margin` times the range's width (at least 1)."""
    slack = margin * max(high - low, 1.0)
    return not low - slack <= q <= high + slack


class TrainingGuards:
    def __init__(self, settings, gamma: float, writer=None, demos: dict | None = None) -> None:
        self.settings: GuardsConfig = settings  # the composed `guards` block (or its dataclass)
        self.gamma, self.writer = float(gamma), writer
        self.r_min, self.r_max = math.inf, -math.inf
        if demos is not None and len(demos.get("reward", ())):  # a demonstration's success bounds Q from the start
            self.rewards(np.asarray(demos["reward"])[np.asarray(demos["step"]) > 0])
        self.residuals: collections.deque = collections.deque(maxlen=int(settings.base_updates))
        self.verdicts: collections.deque = collections.deque(maxlen=int(settings.reward_episodes))
        self.episodes = self.successes = 0
        self.tripped: dict[str, dict] = {}  # name → its record, in the order they tripped

    @classmethod
    def for_learner(cls, cfg, algo, writer, demos: dict | None) -> TrainingGuards:
        """The learner's guards (`cfg.guards`, the algorithm's γ); an algorithm with an `acting_batch` (PPO's
        log-probability check) is told the actor's batch shape, `actor.num_envs` observations per policy call."""
        if hasattr(algo, "acting_batch"):
            algo.acting_batch = int(cfg.actor.num_envs)
        return cls(cfg.guards, algo.batch_spec.gamma, writer, demos)

    # --- what the learner feeds in -------------------------------------------------------------------------------
    def rewards(self, rewards: np.ndarray) -> None:
        """Per-step training rewards as they arrive (the range the return, and so Q, can span)."""
        if len(rewards):
            self.r_min, self.r_max = min(self.r_min, float(np.min(rewards))), max(self.r_max, float(np.max(rewards)))

    def episode(self, success: bool, learned: dict | None = None) -> None:
        """A finished online episode: the simulator's (or a person's) success and, with a learned reward, the
        learner's tally of it (`success_prob_max`: the model's highest success probability in the episode)."""
        self.episodes += 1
        self.successes += bool(success)
        if self.successes == 0 and self.episodes >= self.settings.success_within_episodes:
            self.trip(
                "no_success",
                f"no successful episode in the first {self.episodes} online episodes: the replay holds no online "
                "success, so a sparse reward has nothing to propagate (only demonstrations, if any, show one)",
                episodes=self.episodes,
            )
        prob = (learned or {}).get("success_prob_max")
        if prob is not None and prob >= 0:  # -1: the reward model gave no probability
            self.verdicts.append((prob >= EVEN_ODDS, bool(success)))
            self._check_reward()

    def update(self, metrics: dict) -> dict:
        """An update's metrics with each guard's state added (`guard_<name>`: 1.0 once it tripped)."""
        if "q_mean" in metrics and self.r_min <= self.r_max:
            self._check_q(float(metrics["q_mean"]), float(metrics.get("alpha", 0.0)) * metrics.get("entropy", 0.0))
        for key in ("residual_abs_mean", "actor_moved"):  # residual RL's and DSRL's distance from the base
            if key in metrics:
                self.residuals.append(float(metrics[key]))
                self._check_base(key)
        skipped = metrics.get("minibatches_skipped_ratio", 0) + metrics.get("minibatches_skipped_kl", 0)
        if skipped:
            self.trip(
                "ppo_skipped",
                f"PPO skipped {skipped:.0f} minibatch(es) before backward() in iteration "
                f"{metrics.get('ppo_iteration', '?')}: |log ratio| up to {metrics.get('max_abs_log_ratio', 0):.3g} "
                f"(skipped for the ratio: {metrics.get('minibatches_skipped_ratio', 0):.0f}, for the KL: "
                f"{metrics.get('minibatches_skipped_kl', 0):.0f})",
                skipped_ratio=metrics.get("minibatches_skipped_ratio", 0),
                skipped_kl=metrics.get("minibatches_skipped_kl", 0),
                max_abs_log_ratio=metrics.get("max_abs_log_ratio"),
            )
        return {**metrics, **{f"guard_{name}": float(name in self.tripped) for name in GUARDS}}

    # --- the checks ----------------------------------------------------------------------------------------------
    def _check_q(self, q: float, bonus: float) -> None:
        low, high = return_range(self.r_min, self.r_max, self.gamma, bonus)
        if q_out_of_range(q, low, high, self.settings.q_margin):
            self.trip(
                "q_range",
                f"the critic's mean Q is {q:.4g}, outside the return's possible range [{low:.4g}, {high:.4g}] "
                f"(rewards in [{self.r_min:.4g}, {self.r_max:.4g}], gamma {self.gamma}) by more than "
                f"guards.q_margin={self.settings.q_margin} of its width: the critic is diverging or bootstraps "
                "from values no return reaches",
                q_mean=q,
                low=low,
                high=high,
                r_min=self.r_min,
                r_max=self.r_max,
            )

    def _check_base(self, key: str = "residual_abs_mean") -> None:
        window = self.residuals
        if len(window) == window.maxlen and max(window) < self.settings.base_epsilon:
            what = {
                "residual_abs_mean": "its mean |action - base action|",
                "actor_moved": "the noise actor's relative weight change since the first update",
            }[key]
            self.trip(
                "unmoved_actor",
                f"the actor never left its base: {what} stayed at or below "
                f"{max(window):.3g} (guards.base_epsilon={self.settings.base_epsilon}) over the last {len(window)} "
                "actor updates: the run measures the base policy, not RL",
                residual_max=max(window),
                updates=len(window),
            )

    def _check_reward(self) -> None:
        window = self.verdicts
        if len(window) < window.maxlen:
            return
        farmed = sum(model and not sim for model, sim in window)
        missed = sum(sim and not model for model, sim in window)
        share = (farmed + missed) / len(window)
        if share > self.settings.reward_disagreement:
            self.trip(
                "reward_disagrees",
                f"the learned reward disagrees with the simulator's success on {share:.0%} of the last {len(window)} "
                f"episodes (guards.reward_disagreement={self.settings.reward_disagreement}): {farmed} scored a "
                f"success the simulator calls a failure (a farmed reward), {missed} the other way",
                share=share,
                episodes=len(window),
                farmed=farmed,
                missed=missed,
            )

    def trip(self, name: str, message: str, **figures) -> None:
        """Flag `name` once: a warning, and a `guard` record in the metrics (the report reads it from there)."""
        if name in self.tripped:
            return
        self.tripped[name] = {"kind": "guard", "guard": name, "message": message, **figures}
        log.warning("guard %s: %s", name, message)
        if self.writer is not None:
            self.writer.write(self.tripped[name])


def run_guards(metrics_path) -> list[dict]:
    """The guards a training run tripped, from its metrics.jsonl (none where there is no such file)."""
    if metrics_path is None:
        return []
    return [m for m in read_metrics(Path(metrics_path)) if m.get("kind") == "guard"]


def guards_markdown(records: list[dict]) -> str:
    """A report's section on what the training run may not have measured (empty when no guard tripped)."""
    if not records:
        return ""
    lines = "".join(f"- **{r['guard']}**: {r['message']}\n" for r in records)
    return f"\n## Warnings: what this run may not have measured\n\n{lines}"
