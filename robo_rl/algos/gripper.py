"""The discrete gripper critic's learning rule (HIL-SERL style): double-DQN targets over open / stay / close,
a random pair of heads for the target (as the continuous critic), and a penalty for each gripper change."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from policies.hybrid import GripperQ, HybridGripperPolicy, gripper_choice
from robo_rl.algos.base import Algorithm
from robo_rl.algos.sac import SAC, soft_update
from robo_rl.configs.algo import SACGripperConfig
from robo_rl.configs.typed import config_from
from robo_rl.precision import autocast, resolve_precision

_SAC = SACGripperConfig()  # the user's settings are SACGripperConfig's; the gripper learner's defaults follow them


@dataclass
class GripperConfig:
    """The gripper critic's learning rule, set from `algo=sac_gripper`'s block (`build_sac_gripper`)."""

    lr: float = _SAC.lr_critic
    tau: float = _SAC.tau
    penalty: float = _SAC.gripper_penalty  # added to the reward of a step whose command changes the gripper
    gripper_state_index: int | None = None  # where the state vector holds the gripper opening (-1 open .. +1 closed)
    grad_clip_norm: float | None = _SAC.grad_clip_norm
    precision: str = _SAC.precision  # as algo.precision (robo_rl/precision.py)


GRIPPER_STATE_NAMES = ("gripper_pos", "gripper_cmd")  # the state entry (-1 open .. +1 closed) of our pick tasks


class GripperLearner:
    def __init__(self, q: GripperQ, cfg: GripperConfig) -> None:
        self.q, self.cfg = q, cfg
        self.target = copy.deepcopy(q).requires_grad_(False)
        self.optim = torch.optim.Adam(q.parameters(), lr=cfg.lr)
        self.device = next(q.parameters()).device
        self.compute_dtype = resolve_precision(cfg.precision, self.device)

    def changes(self, batch: dict, choice: torch.Tensor) -> torch.Tensor:
        """Whether each step's gripper command changed the gripper: close while open or open while closed
        (with no gripper state in the observation: any open or close command)."""
        if self.cfg.gripper_state_index is None:
            return choice != 1
        closed = batch["obs"]["state"][:, self.cfg.gripper_state_index] > 0.0
        return ((choice == 2) & ~closed) | ((choice == 0) & closed)

    def update(self, batch: dict) -> dict:
        """One gradient step on a transition batch (obs, action [.., gripper last], reward, discount, next_obs)."""
        with autocast(self.compute_dtype, self.device):
            return self._update(batch)

    def _update(self, batch: dict) -> dict:
        choice = gripper_choice(batch["action"][:, -1])
        reward = batch["reward"] + self.cfg.penalty * self.changes(batch, choice).float()
        with torch.no_grad():
            best_next = self.q(batch["next_obs"]).mean(0).argmax(-1, keepdim=True)  # double DQN: online picks
            target_q = self.target(batch["next_obs"])  # [heads, B, 3]
            pair = torch.randperm(target_q.shape[0])[:2]
            next_v = target_q[pair].gather(-1, best_next.expand(len(pair), -1, -1)).squeeze(-1).min(0).values
            target = reward + batch["discount"] * next_v
        all_q = self.q(batch["obs"])  # [heads, B, 3]
        q = all_q.gather(-1, choice.view(1, -1, 1).expand(all_q.shape[0], -1, -1)).squeeze(-1)
        loss = F.mse_loss(q, target.expand_as(q))
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), self.cfg.grad_clip_norm)
        self.optim.step()
        soft_update(self.target, self.q, self.cfg.tau)
        return {
            "gripper_loss": loss.item(),
            "gripper_q": float(q.detach().mean()),
            "gripper_change_rate": float(self.changes(batch, choice).float().mean()),
        }

    def state_dict(self) -> dict:
        return {"q": self.q.state_dict(), "target": self.target.state_dict(), "optim": self.optim.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optim.load_state_dict(state["optim"])


class SACWithGripper(Algorithm):
    """`algo=sac_gripper`: SAC moves the arm (every action dimension but the last), the discrete critic above
    picks the gripper command; both learn from the same batches. The acting policy is the hybrid one."""

    def __init__(self, policy: HybridGripperPolicy, arm: SAC, gripper: GripperLearner) -> None:
        self.policy, self.arm, self.gripper = policy, arm, gripper
        self.batch_spec = arm.batch_spec

    def update(self, batches: list[dict]) -> dict:
        for batch in batches:
            gripper_metrics = self.gripper.update(batch)
        arm_batches = [{**b, "action": b["action"][:, :-1]} for b in batches]
        return {**self.arm.update(arm_batches), **gripper_metrics}

    def state_dict(self) -> dict:
        # the arm's SAC state with "policy" the whole hybrid policy (what actors run and `eval` loads)
        return {**self.arm.state_dict(), "policy": self.policy.state_dict(), "gripper": self.gripper.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.gripper.load_state_dict(state["gripper"])
        self.arm.load_state_dict({**state, "policy": self.policy.arm.state_dict()})


def build_sac_gripper(
    policy: HybridGripperPolicy, observation_space, action_dim: int, state_names: tuple = (), **keys
) -> SACWithGripper:
    """`algo=sac_gripper`: SAC on the arm's action dimensions, the discrete critic on the gripper's, from one block
    (SACGripperConfig): the gripper critic learns at the SAC critic's rate, Polyak rate, clip and precision."""
    if not isinstance(policy, HybridGripperPolicy):
        raise ValueError("algo=sac_gripper needs policy=hybrid_gripper (an arm policy and a discrete gripper critic)")
    cfg = config_from(SACGripperConfig, keys, "algo")
    arm = SAC(policy.arm, observation_space, cfg)
    names = list(state_names)
    gripper = GripperLearner(
        policy.gripper,
        GripperConfig(
            lr=cfg.lr_critic,
            tau=cfg.tau,
            penalty=cfg.gripper_penalty,
            grad_clip_norm=cfg.grad_clip_norm,
            precision=cfg.precision,
            gripper_state_index=next((names.index(n) for n in GRIPPER_STATE_NAMES if n in names), None),
        ),
    )
    return SACWithGripper(policy, arm, gripper)
