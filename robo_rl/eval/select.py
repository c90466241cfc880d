"""Which of a run's evaluated checkpoints a report stands for (`eval.select`).

The best point estimate among many noisy evaluations is an optimistic pick: with ten checkpoints at a true 0.8 on
50 episodes, one of them reads 0.9 by chance. `lower_bound` (the default) takes the highest Wilson 95% lower bound,
which rewards both a high rate and the episodes behind it (45/50 [0.79, 0.96] beats 3/3 [0.44, 1.0]); `point_estimate`
takes the highest rate, `last` the newest checkpoint. Ties go to the later checkpoint (more training).

Candidates are the run's checkpoints with an evaluation on the same seeds and episode count (the newest, evaluated
now, and any earlier `robo-rl eval checkpoint=<file>` reports under <run>/eval/). Those seeds are held out from
training: evaluation seeds start at `eval.seed` (1,000,000), training episodes at the actors' `seed + 1000 * actor +
100003 * env` and continue on each env's own stream, demonstrations at `demos.seed` (100,000); `heldout_note` says
where a configuration makes them meet.
"""

from __future__ import annotations

import json
from pathlib import Path

from robo_rl.configs.eval import SELECT_RULES as RULES
from robo_rl.eval.wilson import wilson_interval
from robo_rl.seeding import ACTOR_SEED_STRIDE, ENV_SEED_STRIDE

MEANINGS = (
    "the highest Wilson 95% lower bound",
    "the highest success rate (optimistic among noisy evaluations)",
    "the newest checkpoint",
)
SELECT_RULES = dict(zip(RULES, MEANINGS, strict=True))


def candidate(checkpoint: str, env_steps: int, successes: int, episodes: int, seed: int | None) -> dict:
    return {
        "checkpoint": str(checkpoint),
        "env_steps": int(env_steps),
        "episodes": int(episodes),
        "successes": int(successes),
        "success_rate": successes / episodes if episodes else float("nan"),
        "success_ci95": list(wilson_interval(successes, episodes)),
        "seed": seed,
    }


def of_result(result: dict, checkpoint: str, env_steps: int) -> dict:
    """A candidate from an evaluation result (robo_rl/eval/episodes.py evaluate_policy, or a report.json)."""
    seed = result.get("seed")
    if seed is None and result.get("per_episode"):  # a report from before the seed was written at the top
        seed = result["per_episode"][0]["seed"]
    return candidate(checkpoint, env_steps, result["successes"], result["episodes"], seed)


def select_checkpoint(candidates: list[dict], rule: str = "lower_bound") -> dict:
    """The chosen candidate under `rule`, the rule and its meaning, and every candidate (oldest first)."""
    if rule not in SELECT_RULES:
        raise ValueError(f"eval.select={rule!r}: one of {', '.join(SELECT_RULES)}")
    if not candidates:
        raise ValueError("no evaluated checkpoint to select from")
    keys = {
        "lower_bound": lambda c: (c["success_ci95"][0], c["env_steps"]),
        "point_estimate": lambda c: (c["success_rate"], c["env_steps"]),
        "last": lambda c: (c["env_steps"],),
    }
    chosen = max(candidates, key=keys[rule])
    return {
        "rule": rule,
        "meaning": SELECT_RULES[rule],
        "chosen": chosen["checkpoint"],
        "candidates": sorted(candidates, key=lambda c: c["env_steps"]),
    }


def evaluated_checkpoints(run_dir: Path, episodes: int, seed: int) -> list[dict]:
    """Candidates from the reports under <run>/eval/ (their own evaluation and the candidates they list) of
    checkpoints still in <run>/checkpoints/, on `episodes` episodes from `seed`; one per checkpoint, its path in this
    run folder (a report may name it relative to where `robo-rl eval` ran, or where the run was before a move)."""
    found: dict[str, dict] = {}
    here = Path(run_dir).resolve() / "checkpoints"
    for path in sorted(Path(run_dir, "eval").glob("*/report.json")) + [Path(run_dir, "eval", "report.json")]:
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(report, dict) or "successes" not in report or "checkpoint" not in report:
            continue  # a suite's report, or not a report
        listed = (report.get("selection") or {}).get("candidates") or []
        own = {**of_result(report, report["checkpoint"], report.get("env_steps", 0)), "report": str(path)}
        for c in [own, *listed]:
            file = here / Path(c["checkpoint"]).name
            if c.get("seed") == seed and c["episodes"] == episodes and file.is_file():
                found.setdefault(str(file), {**c, "checkpoint": str(file)})
    return list(found.values())


def heldout_note(cfg, seed: int, episodes: int) -> str:
    """Whether the evaluation seeds are held out from the seeds training and demonstrations started from."""
    actors, envs = int(cfg.train.actors), int(cfg.actor.num_envs)
    train = {int(cfg.seed) + ACTOR_SEED_STRIDE * a + ENV_SEED_STRIDE * e for a in range(actors) for e in range(envs)}
    demos = set(range(int(cfg.demos.seed), int(cfg.demos.seed) + int(cfg.demos.num_episodes)))
    used = sorted(s for s in train | demos if seed <= s < seed + episodes)
    span = f"seeds {seed} .. {seed + episodes - 1}"
    if used:
        return f"{span}: NOT held out, training or demonstrations started from seeds {used[:5]}"
    return f"{span}: held out (training starts from seed {int(cfg.seed)}, demonstrations from {int(cfg.demos.seed)})"


def selection_markdown(selection: dict) -> str:
    """The rule that chose the checkpoint and every candidate, as report.md shows them."""
    text = (
        f"\n## Checkpoint selection\n\nchosen by `eval.select={selection['rule']}` ({selection['meaning']}) among "
        f"{len(selection['candidates'])} evaluated checkpoint(s)"
        + (f"; {selection['heldout']}" if selection.get("heldout") else "")
        + "\n\n| checkpoint | env steps | success | rate | Wilson 95% CI | chosen |\n|---|---|---|---|---|---|\n"
    )
    for c in selection["candidates"]:
        low, high = c["success_ci95"]
        mark = "**chosen**" if c["checkpoint"] == selection["chosen"] else ""
        text += (
            f"| `{Path(c['checkpoint']).name}` | {c['env_steps']} | {c['successes']}/{c['episodes']} "
            f"| {c['success_rate']:.2f} | [{low:.2f}, {high:.2f}] | {mark} |\n"
        )
    return text


def choose(
    run_dir: Path, result: dict, checkpoint: str, env_steps: int, rule: str, cfg, say=lambda _: None
) -> tuple[dict, str, int]:
    """The evaluation a run's report stands for under `rule`: `result` (of the newest `checkpoint`, just evaluated)
    or an earlier evaluated checkpoint's, with the selection (rule, candidates, held-out note) added; `say` is told
    which and why. Returns (that result, its checkpoint, its env steps)."""
    now = of_result(result, checkpoint, env_steps)
    earlier = [
        c
        for c in evaluated_checkpoints(run_dir, result["episodes"], now["seed"])
        if Path(c["checkpoint"]).name != Path(checkpoint).name
    ]
    selection = select_checkpoint([now, *earlier], rule)
    selection["heldout"] = heldout_note(cfg, now["seed"], result["episodes"])
    say(
        f"checkpoint: {Path(selection['chosen']).name}, chosen by eval.select={rule} ({selection['meaning']}) among "
        f"{len(selection['candidates'])} evaluated; {selection['heldout']}"
    )
    if selection["chosen"] == now["checkpoint"]:
        return {**result, "selection": selection}, checkpoint, env_steps
    chosen = next(c for c in earlier if c["checkpoint"] == selection["chosen"])
    stored = json.loads(Path(chosen["report"]).read_text()) if chosen.get("report") else {}
    base = {"mean_length": float("nan"), "mean_return": float("nan")}  # a candidate listed without its report
    keep = {k: v for k, v in stored.items() if k not in ("selection", "checkpoint", "env_steps", "videos")}
    fields = {k: chosen[k] for k in ("episodes", "seed", "successes", "success_rate", "success_ci95")}
    return {**base, **keep, **fields, "selection": selection}, chosen["checkpoint"], chosen["env_steps"]
