"""A RECAP policy's guidance scale, chosen on validation episodes (`robo-rl recap tune`).

The scale w is a knob of sampling, not of training: w = 1 samples the policy conditioned on "advantage positive", and
w > 1 moves further along the direction from the unconditional policy to it (classifier-free guidance as a policy
improvement operator: Frans et al. 2025, "Diffusion Guidance Is a Controllable Policy Improvement Operator", where a
larger w improved more, up to a point). Which w is best depends on the task and the data. This runs the policy at
each candidate on the same validation episodes (seeds apart from collection and evaluation; not stored as data), keeps
the best as the checkpoint's own guidance (ties: the smaller scale, nearer the data) and writes the table beside it,
<checkpoint>.guidance.json. On a robot, validation episodes are robot time: fewer candidates, fewer episodes.
"""

from __future__ import annotations

import json
from pathlib import Path

from policies.checkpoint import read_bc_checkpoint
from robo_rl.config import ConfigError
from robo_rl.offline.bc import save_atomic
from robo_rl.offline.recap_collect import collect, load_acting_base
from robo_rl.offline.recap_vla import is_vla, read_marker, write_guidance


def best_guidance(results: dict[float, dict]) -> float:
    """The scale with the most successes; a tie goes to the smaller scale."""
    return min(results, key=lambda w: (-results[w]["successes"], w))


def tune_guidance(
    env, path: Path, guidances: list[float], episodes: int, seed: int, progress: bool = True, task: str | None = None
) -> tuple[float, dict[float, dict]]:
    """Each scale on `episodes` episodes from seed `seed` (the same episodes for each); the best written into the
    checkpoint at `path` (a fine-tuned SmolVLA: its folder's marker) as its guidance. Returns it and every scale's
    result."""
    vla = is_vla(path)
    payload = None if vla else read_bc_checkpoint(path)
    if (read_marker(path) is None) if vla else not payload["config"].get("advantage_embedding"):
        raise ConfigError(f"recap tune: {path} is not advantage-conditioned (run recap finetune first)")
    base, results = load_acting_base(path, env, task=task), {}
    for w in guidances:  # one base, its scale set per pass
        base.model.guidance = float(w)
        results[w] = collect(env, base, episodes, seed, None, progress)
    best = best_guidance(results)
    table = {
        str(w): {k: r[k] for k in ("successes", "episodes", "success_ci95", "mean_length")} for w, r in results.items()
    }
    tuned = {"guidance": float(best), "episodes": episodes, "seed": seed, "results": table}
    if vla:
        write_guidance(path, best, tuned=tuned)
    else:
        payload["config"]["guidance"] = float(best)
        payload["recap"] = {**payload.get("recap", {}), "guidance": float(best), "tuned": tuned}
        save_atomic(payload, path)
    path.with_suffix(".guidance.json").write_text(json.dumps(tuned, indent=2))
    return best, results
