"""The acting-policy protocol (policies/acting.py): a declaring policy is called as it is; one that does not declare
it is seen through it once, with the defaults for what it lacks, so the actor never asks what a policy has."""

import torch

from policies.acting import ActingPolicy, acting_policy
from policies.gaussian import TanhGaussianPolicy
from sim.point_reach import PointReachEnv

OBS = {"state": torch.zeros(2, 4), "images": {}}


class Stateless:  # a plugin's policy: `act` only
    def act(self, obs, deterministic=False):
        return torch.full((len(obs["state"]), 2), 0.5 if deterministic else -0.5)


class OneEpisode(Stateless):  # per-episode state for one env, no slots
    def __init__(self):
        self.resets = []

    def reset(self):
        self.resets.append("all")


class Slotted(OneEpisode):  # per-env state by slot, and extras
    vector_slots = True
    extras_spec = {"slot": ((1,), float)}

    def act_with_extras(self, obs, deterministic=False, slots=None):
        return self.act(obs, deterministic), {"slot": torch.tensor(slots, dtype=torch.float32)[:, None]}

    def reset(self, slot=None):
        self.resets.append(slot)


def test_a_declaring_policy_is_its_own_acting_policy_with_the_defaults_it_does_not_override():
    env = PointReachEnv()
    policy = TanhGaussianPolicy(env.observation_space, 2)
    assert acting_policy(policy) is policy and isinstance(policy, ActingPolicy)
    assert policy.explore_step(OBS) is None, "no warm-up of its own: the actor draws uniform actions"
    actions, extras = policy.act_with_extras(OBS, deterministic=True, slots=[0, 1])
    assert extras == {} and torch.equal(actions, policy.act(OBS, deterministic=True))
    assert policy.vector_slots and policy.execute_steps == 1 and dict(policy.extras_spec) == {}


def test_a_policy_that_does_not_declare_it_is_called_through_the_defaults():
    plain = acting_policy(Stateless())
    actions, extras = plain.act_with_extras(OBS, deterministic=True, slots=[0, 1])
    assert torch.all(actions == 0.5) and extras == {}
    assert plain.explore_step(OBS) is None
    plain.reset(1)  # nothing to forget
    assert plain.vector_slots, "no reset: no per-episode state, so it acts for several envs"

    one = OneEpisode()
    fitted = acting_policy(one)
    assert not fitted.vector_slots, "a reset without slots: it keeps one env's episode"
    fitted.reset(0)
    assert one.resets == ["all"]
    assert torch.all(fitted.act_with_extras(OBS, slots=[0, 1])[0] == -0.5)  # not given slots it cannot take

    slotted = Slotted()
    fitted = acting_policy(slotted)
    _, extras = fitted.act_with_extras(OBS, slots=[3, 5])
    assert fitted.vector_slots and extras["slot"].ravel().tolist() == [3, 5]
    fitted.reset(5)
    assert slotted.resets == [5]
