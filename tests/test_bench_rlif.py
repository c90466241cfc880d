"""bench/rlif.py's plumbing: the arms of issue 52's comparison differ only in the reward, and the human's
takeovers (what RLIF's hypothesis says falls) are counted from a run's stored records as onsets, not steps."""

import numpy as np
from omegaconf import OmegaConf

from bench.rlif import ARMS, takeovers_per_1k, untouched_per_1k
from robo_rl.config import load_config
from robo_rl.data.storage import SegmentStore
from tests.test_storage import FIELDS, episode


def test_the_arms_differ_only_in_the_reward():
    composed = {name: OmegaConf.to_container(load_config(overrides)) for name, (overrides, _) in ARMS.items()}
    rewards = {name: cfg.pop("reward") for name, cfg in composed.items()}
    env, rlif, classifier = (composed[n] for n in ("rlif_pick_env", "rlif_pick_intervention", "rlif_pick_classifier"))
    assert env == rlif == classifier  # the same task, algorithm, budget and human in every arm
    human = env["human"]["devices"][0]
    assert human["_target_"] == "sim.simulated_human.SimulatedHuman" and human["decay"] == 1.0  # it does not tire
    assert env["demos"]["num_episodes"] == 0 and env["train"]["total_env_steps"] == 6000
    assert env["env"]["cameras"] == ["front", "wrist"]  # the classifier scores the cameras
    assert rewards["rlif_pick_env"] == {}  # the simulator's own reward
    assert rewards["rlif_pick_intervention"]["_target_"] == "robo_rl.rewards.intervention.InterventionReward"
    assert (rewards["rlif_pick_intervention"]["takeover_reward"], rewards["rlif_pick_intervention"]["step_cost"]) == (
        -1.0,
        0.0,
    )
    rejected = rewards.pop("rlif_pick_rejected")  # RLIF's labelling: the same reward, paid on the rejected action
    assert composed["rlif_pick_rejected"] == env and rejected["penalize"] == "rejected"
    assert {**rejected, "penalize": "executed"} == rewards["rlif_pick_intervention"]
    assert rewards["rlif_pick_classifier"]["model"].endswith("bench_critic/classifier")


def test_takeovers_are_counted_once_per_onset_and_untouched_episodes_by_where_they_end(tmp_path):
    store = SegmentStore(tmp_path / "replay" / "online", FIELDS)
    first = episode(0, length=400, intervention_steps=[2, 3, 4, 10, 11, 400])  # onsets at env steps 2, 10, 400
    # the next episode starts under the human again (a new takeover, env step 401); a hold over a segment's end
    # (steps 299-301: env step 699) counts once; two more after 1k env steps (1001, 1050)
    second = episode(1, length=700, intervention_steps=[1, 299, 300, 301, 601, 650])
    store.write(first, np.full(401, "actor-0", dtype=object))
    store.write({k: v[:300] for k, v in second.items()}, np.full(300, "actor-0", dtype=object))
    store.write({k: v[300:] for k, v in second.items()}, np.full(401, "actor-0", dtype=object))
    store.write(episode(2, length=100), np.full(101, "actor-0", dtype=object))  # the policy alone all the way
    assert takeovers_per_1k(tmp_path) == [5, 2]
    assert untouched_per_1k(tmp_path) == [0.0, 0.5]  # by the 1k in which an episode ends: ep 0 | ep 1, ep 2
