"""Intervention as the reward (RLIF, issue 52) against the task's reward and a learned reward, on our pick task from
pixels with the simulated human: arms that differ only in the reward.

    python bench/rlif.py rlif_pick_env --seeds 0            # the simulator's dense reward (reach, grasp, lift)
    python bench/rlif.py rlif_pick_rejected --seeds 0       # RLIF: -1 on the policy's action the human stepped in
                                                            # against (RLIF's labelling), else 0
    python bench/rlif.py rlif_pick_intervention --seeds 0   # the same, with the -1 on the human's first correction
                                                            # (`reward.penalize=executed`: what the first runs used)
    python bench/rlif.py rlif_pick_classifier --seeds 0     # the pick success classifier of bench/critic.py
    python bench/rlif.py --compare [--critic]   # the table (success, takeovers per 1k, wall): rlif_pick_compare.json

Training, evaluation and the result files are bench/learning.py's (its options: --seeds, --add, --runs, ...): this
module only adds the three recipes to its table, so each arm writes bench/results/learning_<arm>.json the same way
every other learning benchmark does. `--compare` reads those files and each run's stored episodes and counts the
human's takeovers (the onsets of its control, not its steps) per 1k env steps: RLIF's hypothesis is that they fall.

The shared recipe is HIL-SERL's on our pick task (`hil_pick_pixels`: SAC from two 64² cameras and proprioception, no
demonstrations, 6k env steps), because the learned reward needs the cameras, with one change: the simulated human
does not tire (`decay=1.0`: every stretch of drift is taken over). bench/learning.py's hil_* runs let its chance fall
by 0.98 per episode, to about 0.06 by 2k env steps (140 episodes) on this task; under RLIF that would switch the
reward off with the human, and the takeovers would fall by the schedule whatever the policy did. RLIF's own
simulated experts intervene by a fixed rule throughout (Luo et al., "RLIF: Interactive Imitation Learning as
Reinforcement Learning", ICLR 2024).
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
from bench._results import write_result  # noqa: E402

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

IMAGES = ("image/front", "image/wrist")  # the pick task's two cameras, as the records name them
ARMS = {
    "rlif_pick_env": ([*SHARED], "the simulator's dense reward, for rlif_pick_intervention and rlif_pick_classifier"),
    "rlif_pick_rejected": (
        [*SHARED, *RLIF_REWARD, "reward.penalize=rejected"],
        "RLIF: the human's takeovers are the only reward, paid on the policy's action they rejected",
    ),
    "rlif_pick_intervention": (
        [*SHARED, *RLIF_REWARD, "reward.penalize=executed"],
        "RLIF's reward paid on the human's first correction (the first runs', before reward.penalize)",
    ),
    "rlif_pick_classifier": (
        [*SHARED, *learning.learned_reward("classifier")],
        "the pick success classifier of bench/critic.py (gated), no task reward",
    ),
}
learning.EXPERIMENTS.update({name: (overrides, None, reference) for name, (overrides, reference) in ARMS.items()})


def stored(run: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """These fields of every record a run's learner stored, in arrival order (one actor: the order they were taken);
    the segments are memory-mapped, so only these fields are read (not the camera frames the others carry)."""
    from robo_rl.data.storage import SegmentStore

    parts: dict[str, list] = {key: [] for key in keys}
    for _, batch, _ in SegmentStore.open(run / "replay" / "online").iter_segments(mmap=True):
        for key in keys:
            parts[key].append(np.array(batch[key]))
    return {key: np.concatenate(v) for key, v in parts.items()}


def human_steps(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(episode id, whether the human commanded it) of each env step of a run, in the order the steps were taken,
    reset records (step 0) left out."""
    rec = stored(run, ("step", "episode_id", "intervention"))
    live = rec["step"] > 0
    return rec["episode_id"][live], rec["intervention"][live].astype(bool)


def takeovers_per_1k(run: Path) -> list[int]:
    """The human's takeovers (a step it commands after one of the same episode it did not) in each 1k env steps."""
    episode, human = human_steps(run)
    before = np.concatenate([[False], human[:-1] & (episode[1:] == episode[:-1])])
    onsets = np.flatnonzero(human & ~before) + 1  # the env step of each
    return [int(((onsets > a) & (onsets <= a + 1000)).sum()) for a in range(0, len(human), 1000)]


def untouched_per_1k(run: Path) -> list[float]:
    """The share of the episodes ending in each 1k env steps that the human never took over: the policy acted close
    enough to the expert all the way (to a success or the time limit)."""
    episode, human = human_steps(run)
    last = np.flatnonzero(np.concatenate([episode[1:] != episode[:-1], [True]]))  # each episode's last step
    touched = np.array([human[episode == episode[i]].any() for i in last])
    return [round(float(1 - touched[(last >= a) & (last < a + 1000)].mean()), 3) for a in range(0, len(human), 1000)]


def at_every_1k(curve: list[dict], tolerance: int = 50) -> list[float | None]:
    """The evaluations at 1k, 2k, ... env steps: the learner also saves a checkpoint every `train.checkpoint_every_s`
    and bench/learning.py evaluates them all, so a curve holds points between those of the env-step schedule."""
    last = max(p["env_steps"] for p in curve)
    out = []
    for mark in range(1000, last + 1, 1000):
        near = min(curve, key=lambda p: abs(p["env_steps"] - mark))
        out.append(near["success"] if abs(near["env_steps"] - mark) <= tolerance else None)
    return out


def critic_at_takeovers(run: Path, last_env_steps: int = 2000) -> dict:
    """What the run's final critic thinks of the human's correction where the human took over: at each takeover of
    the last `last_env_steps` env steps, Q(s, the human's action) against Q(s, what the policy proposed there), the
    ensemble's mean. With `reward.penalize=executed` the penalty is paid on the takeover step's executed action, the
    human's, so the critic is taught that the expert's correction there is what costs; with `rejected` (RLIF's
    labelling) it is paid on the policy's proposal there, which the critic should come to rank below the human's.
    On the human's later steps (the hold) the same comparison is the control."""
    import torch

    from robo_rl.config import load_saved_config, make_algorithm, make_env, make_policy
    from robo_rl.runs import load_checkpoint

    cfg = load_saved_config(run / "config.yaml")
    env = make_env(cfg)
    algo = make_algorithm(cfg, make_policy(cfg, env), env)
    env.close()
    final = max((run / "checkpoints").glob("step_*.pt"))
    algo.load_state_dict(load_checkpoint(final)["algo"])
    rec = stored(run, ("step", "episode_id", "intervention", "action_executed", "action_policy", "state", *IMAGES))
    human = rec["intervention"].astype(bool)
    same = np.concatenate([[False], rec["episode_id"][1:] == rec["episode_id"][:-1]])  # row i-1 is its observation
    before = np.concatenate([[False], human[:-1]]) & same
    env_steps = np.cumsum(rec["step"] > 0)
    recent = (env_steps > env_steps[-1] - last_env_steps) & (rec["step"] > 0) & same
    out = {"checkpoint": final.name}
    for label, rows in (("takeover", recent & human & ~before), ("hold", recent & human & before)):
        rows = np.flatnonzero(rows)
        obs = {
            "state": torch.from_numpy(rec["state"][rows - 1]),
            "images": {k.split("/", 1)[1]: torch.from_numpy(rec[k][rows - 1]) for k in IMAGES},
        }
        with torch.no_grad():
            q_human = algo.critic(obs, torch.from_numpy(rec["action_executed"][rows])).mean(0).numpy()
            q_policy = algo.critic(obs, torch.from_numpy(rec["action_policy"][rows])).mean(0).numpy()
        out[label] = {
            "steps": len(rows),
            "q_human_action": round(float(q_human.mean()), 3),
            "q_policy_action": round(float(q_policy.mean()), 3),
            "share_human_preferred": round(float((q_human > q_policy).mean()), 3),
        }
    return out


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
                    "run": run["run"],
                    "final_success": run["curve"][-1]["success"],
                    "final_ci95": run["curve"][-1]["ci95"],
                    "success_at_1k": at_every_1k(run["curve"]),
                    "takeovers_per_1k": takeovers_per_1k(folder) if folder.exists() else None,
                    "untouched_episodes_per_1k": untouched_per_1k(folder) if folder.exists() else None,
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
        parser.add_argument("--critic", action="store_true", help="also each run's critic at the takeovers (slow)")
        args = parser.parse_args()
        table = compare(Path(args.results))
        if args.critic:
            for name, runs in table.items():
                if name != "rlif_pick_classifier":  # its runs have the same layout; two arms answer the question
                    for row in runs:
                        row["critic_at_takeovers"] = critic_at_takeovers(Path(row["run"]))
        path = write_result("rlif_pick_compare", {"results": args.results, "arms": table})
        print(json.dumps(table, indent=1), f"\nwritten to {path}")
        return
    learning.main()


if __name__ == "__main__":
    main()
