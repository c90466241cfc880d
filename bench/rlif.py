"""Intervention as the reward (RLIF, issue 52) against the task's reward and a learned reward, on our pick task from
pixels with the simulated human: three arms that differ only in the reward.

    python bench/rlif.py rlif_pick_env --seeds 0            # the simulator's dense reward (reach, grasp, lift)
    python bench/rlif.py rlif_pick_intervention --seeds 0   # RLIF: -1 on the step the human takes over, else 0
    python bench/rlif.py rlif_pick_classifier --seeds 0     # the pick success classifier of bench/critic.py
    python bench/rlif.py --compare                          # the table: success, takeovers per 1k env steps, wall

Training, evaluation and the result files are bench/learning.py's (its options: --seeds, --add, --runs, ...): this
module only adds the three recipes to its table, so each arm writes bench/results/learning_<arm>.json the same way
every other learning benchmark does. `--compare` reads those files and each run's stored episodes and counts the
human's takeovers (the onsets of its control, not its steps) per 1k env steps: RLIF's hypothesis is that they fall.

The shared recipe is HIL-SERL's on our pick task (`hil_pick_pixels`: SAC from two 64² cameras and proprioception, no
demonstrations, 6k env steps), because the learned reward needs the cameras, with one change: the simulated human
does not tire (`decay=1.0`: every stretch of drift is taken over). bench/learning.py's hil_* runs let its chance fall
by 0.98 per episode, about 0.07 by 2k env steps on this task; under RLIF that would switch the reward off with the
human, and the takeovers would fall by the schedule whatever the policy did. RLIF's own simulated experts intervene
by a fixed rule throughout (Luo et al., "RLIF: Interactive Imitation Learning as Reinforcement Learning", ICLR 2024).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import learning  # noqa: E402

# the same human in every arm: the scripted expert taking over each stretch of drift, never tiring
TIRELESS_HUMAN = ["human=sim", "human.devices.0.decay=1.0"]
SHARED = [*learning.HIL_TASKS["pick_pixels"], "demos.num_episodes=0", *TIRELESS_HUMAN]
# RLIF's reward as the paper labels it: -1 where the expert steps in, 0 elsewhere; the correction goes on in the
# episode (the expert's steps are data, as in RLIF's runs), no cost per step (it would reward ending episodes early)
RLIF_REWARD = [
    "reward=intervention",
    "reward.takeover_reward=-1.0",
    "reward.step_cost=0.0",
    "reward.end_on_takeover=false",
]

ARMS = {
    "rlif_pick_env": ([*SHARED], "the simulator's dense reward, for rlif_pick_intervention and rlif_pick_classifier"),
    "rlif_pick_intervention": ([*SHARED, *RLIF_REWARD], "RLIF: the human's takeovers are the only reward"),
    "rlif_pick_classifier": (
        [*SHARED, *learning.learned_reward("classifier")],
        "the pick success classifier of bench/critic.py (gated), no task reward",
    ),
}
learning.EXPERIMENTS.update({name: (overrides, None, reference) for name, (overrides, reference) in ARMS.items()})


def takeovers_per_1k(run: Path) -> list[int]:
    """The human's takeovers (a step it commands after one of the same episode it did not) in each 1k env steps of
    a run, from the step records its learner stored in arrival order (one actor: the order they were taken)."""
    from robo_rl.data.storage import SegmentStore

    step, episode, human = [], [], []
    for _, batch, _ in SegmentStore.open(run / "replay" / "online").iter_segments(mmap=False):
        step.append(batch["step"]), episode.append(batch["episode_id"]), human.append(batch["intervention"])
    step, episode, human = (np.concatenate(a) for a in (step, episode, human))
    live = step > 0  # a reset record (step 0) is no env step
    step, episode, human = step[live], episode[live], human[live].astype(bool)
    before = np.concatenate([[False], human[:-1] & (episode[1:] == episode[:-1])])
    env_steps = np.arange(1, len(step) + 1)
    onsets = env_steps[human & ~before]
    return [int(((onsets > a) & (onsets <= a + 1000)).sum()) for a in range(0, len(step), 1000)]


def compare(results: Path = ROOT / "bench" / "results") -> dict:
    """Per arm and seed: the final evaluation (the simulator's success, the policy alone), the curve, the takeovers
    and intervention rate per 1k env steps, training success per 1k, and wall time."""
    out = {}
    for name in ARMS:
        path = results / f"learning_{name}.json"
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        out[name] = []
        for run in result["runs"]:
            folder = Path(run["run"])
            out[name].append(
                {
                    "seed": run["seed"],
                    "final_success": run["curve"][-1]["success"],
                    "final_ci95": run["curve"][-1]["ci95"],
                    "curve": [p["success"] for p in run["curve"]],
                    "takeovers_per_1k": takeovers_per_1k(folder) if folder.exists() else None,
                    "intervention_rate_per_1k": run["training"].get("intervention_rate_per_1k"),
                    "training_success_per_1k": run["training"]["success_per_1k"],
                    "wall_s": run["wall_s"],
                }
            )
    return out


def main() -> None:
    if "--compare" in sys.argv[1:]:
        parser = argparse.ArgumentParser(description="RLIF's comparison table from the result files")
        parser.add_argument("--compare", action="store_true")
        parser.add_argument("--results", default=str(ROOT / "bench" / "results"))
        args = parser.parse_args()
        print(json.dumps(compare(Path(args.results)), indent=1))
        return
    learning.main()


if __name__ == "__main__":
    main()
