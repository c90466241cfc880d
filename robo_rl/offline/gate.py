"""RL-100's offline-evaluation gate: a new policy replaces the current one only when an off-policy estimate says it is
better by a margin, so an iteration of offline improvement can never make the deployed policy worse by its own
estimate (RL-100, Lei et al., 2025, arXiv:2510.14830: iterative offline updates, each accepted only on an OPE gain).

    J(π) = FQE estimate of π's return from the held-out episodes' start states   (robo_rl/offline/fqe.py)
    accept  ⇔  J(candidate) − J(current) > margin

Every call appends one JSON line to the log (`gate.jsonl` in the run folder): both estimates, the gain, the margin,
the decision and the FQE fit's figures; in sim, with `eval_episodes` > 0, also both policies' real success (Wilson
intervals, robo_rl/eval) and whether the gate's call agreed with it (accepted ⇔ the candidate's real success rate is
higher). `gate(...)` is what another command (an offline iteration) calls; `robo-rl gate` loads two checkpoints.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from robo_rl.configs.parl import GateConfig
from robo_rl.configs.typed import config_from
from robo_rl.data.datasets import Episode
from robo_rl.eval.episodes import evaluate_policy
from robo_rl.offline.fqe import fitted_q_evaluation

LOG_FILE = "gate.jsonl"


def gate_config(keys: dict) -> GateConfig:
    """The gate's settings from `key: value` pairs, each checked (a one-line ConfigError naming the bad one)."""
    from robo_rl.config import ConfigError

    try:
        return config_from(GateConfig, keys, "gate")
    except ValueError as e:
        raise ConfigError(str(e)) from None


def held_out(episodes: list[Episode], share: float) -> list[Episode]:
    """The newest `share` of the episodes with at least one transition (in the data's order), at least one."""
    usable = [ep for ep in episodes if len(ep) > 0]
    if not usable:
        raise ValueError("the data holds no episode with a transition: nothing to evaluate a policy on")
    return usable[len(usable) - max(1, math.ceil(share * len(usable))) :]


def execute_steps_of(policy) -> int:
    return int(getattr(policy, "execute_steps", 1) or 1)


def real_success(env, policy, episodes: int, seed: int) -> dict:
    result = evaluate_policy(env, policy, episodes, seed)
    return {k: result[k] for k in ("success_rate", "success_ci95", "successes", "episodes")}


def gate(
    current,
    candidate,
    episodes: list[Episode],
    cfg: GateConfig,
    log_path: str | Path | None = None,
    env=None,
    names: tuple[str, str] = ("current", "candidate"),
    eval_seed: int = 0,
) -> dict:
    """Decide whether `candidate` (an acting policy) replaces `current`, from FQE on the held-out share of
    `episodes`; with `env` and `cfg.eval_episodes` > 0, check the call against both policies' real success there.
    Returns the log line (also appended to `log_path` when given); `accepted` is the decision."""
    data = held_out(episodes, cfg.held_out)
    started = time.monotonic()
    fits = {
        "current": fitted_q_evaluation(current, data, execute_steps_of(current), cfg),
        "candidate": fitted_q_evaluation(candidate, data, execute_steps_of(candidate), cfg),
    }
    gain = fits["candidate"]["estimate"] - fits["current"]["estimate"]
    line = {
        "kind": "gate",
        "time": time.time(),
        "current": names[0],
        "candidate": names[1],
        "estimator": "fqe",
        "current_estimate": fits["current"]["estimate"],
        "candidate_estimate": fits["candidate"]["estimate"],
        "gain": gain,
        "margin": cfg.margin,
        "accepted": gain > cfg.margin,
        "decision": "accept" if gain > cfg.margin else "reject",
        "held_out_episodes": len(data),
        "behaviour_return": fits["current"]["behaviour_return"],
        "fqe": {
            k: {x: v[x] for x in ("td_loss", "decisions", "estimate_std", "execute_steps")} for k, v in fits.items()
        },
        "settings": {
            k: getattr(cfg, k) for k in ("gamma", "fqe_steps", "fqe_batch_size", "fqe_lr", "seed", "held_out")
        },
        "fqe_s": round(time.monotonic() - started, 2),
    }
    if env is not None and cfg.eval_episodes > 0:
        real = {
            "current": real_success(env, current, cfg.eval_episodes, eval_seed),
            "candidate": real_success(env, candidate, cfg.eval_episodes, eval_seed),
        }
        better = real["candidate"]["success_rate"] > real["current"]["success_rate"]
        line["real"] = {**real, "candidate_better": better, "agreed": better == line["accepted"]}
    if log_path is not None:
        path = Path(log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps(line, default=list) + "\n")
    return line
