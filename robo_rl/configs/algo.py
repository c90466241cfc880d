"""Every algorithm's settings: one typed field each, with its default, range and meaning (the only place they are
written). `launch/conf/algo/<name>.yaml` names the builder and what differs; `ALGO_CONFIGS` says which dataclass a
builder's block is checked against. No torch here: config checks and `--help` read it before any model exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from robo_rl.configs.parl import ParlConfig
from robo_rl.configs.typed import setting

PRECISIONS = ("auto", "float32", "bfloat16")
SAC_LR = 3e-4
DECISION_STEPS = "with execute_steps 1 only; a chunk of E steps is one decision with E-step returns"


@dataclass
class SACConfig:
    """SAC with prior data (RLPD)."""

    retired_keys: ClassVar[tuple[str, ...]] = ("gripper_penalty",)  # algo=sac runs saved it, unread (sac_gripper's)

    batch_size: int = setting(256, "samples per gradient update", low=1)
    n_step: int = setting(1, "n-step returns (cut at episode ends; robo_rl/data/replay.py)", low=1)
    critic_updates_per_actor: int = setting(1, "critic updates per actor update (each on a fresh batch)", low=1)
    gamma: float = setting(0.99, "discount factor", low=0, high=1)
    tau: float = setting(0.005, "target network Polyak rate", above=0, high=1)
    lr_actor: float = setting(SAC_LR, "actor learning rate", above=0, high=1)
    lr_critic: float = setting(SAC_LR, "critic learning rate", above=0, high=1)
    lr_alpha: float = setting(SAC_LR, "temperature learning rate", above=0, high=1)
    init_temperature: float = setting(0.1, "initial SAC temperature alpha", above=0)
    target_entropy: float | None = setting(None, "SAC target entropy (null: -|A|/2)")
    backup_entropy: bool = setting(
        True,
        "the TD target includes the next step's entropy bonus (soft Q, as SAC); false: Q is the reward's alone, and "
        "the entropy shapes only the actor (SERL's option; with a 0/1 success reward the bonus summed over a long "
        "episode can outweigh the success)",
    )
    num_critics: int = setting(2, "critics in the ensemble", low=1)
    critic_subsample: int = setting(2, "critics the TD target takes the min over (at most num_critics)", low=1)
    critic_hidden: tuple[int, ...] = setting((256, 256), "critic MLP widths", low=1)
    critic_layer_norm: bool = setting(True, "LayerNorm in the critics")
    grad_clip_norm: float | None = setting(10.0, "gradient norm clip", above=0)
    share_encoder: bool = setting(
        False, "the policy uses the critic's image encoder (DrQ/SERL); actor gradients stop at it"
    )
    image_augmentation: str | None = setting(
        "random_shift",
        "DrQ random shift on obs and next_obs images (null: none; a no-op without cameras)",
        choices=("random_shift",),
    )
    augment_pad: int = setting(4, "pixels of replicate padding for random_shift", low=0, high=64)
    target_q_clip: tuple[float, float] | None = setting(
        None, "clip TD targets to [low, high], the return's range (e.g. [0, 1] for a 0/1 reward that ends episodes)"
    )
    precision: str = setting(
        "auto",
        "matrix-product precision: bfloat16 is mixed (outputs, LayerNorm, losses, Adam stay float32); auto: "
        "bfloat16 where native (CUDA, CPUs with AVX512-BF16/AMX); robo_rl/precision.py",
        choices=PRECISIONS,
    )
    intervention_bc_weight: float = setting(
        0.0,
        "> 0: the actor also regresses its mean action on the human's on intervention rows (HG-DAgger's "
        "corrections inside SAC's actor loss); 0: interventions teach the critic only",
        low=0,
    )


@dataclass
class SACGripperConfig(SACConfig):
    """SAC for the arm and a discrete gripper critic (HIL-SERL style); the gripper critic learns at the SAC critic's
    rate, Polyak rate, gradient clip and precision."""

    gripper_penalty: float = setting(-0.02, "reward added per gripper change (open <-> closed)", high=0)


@dataclass
class DSRLConfig(SACConfig):
    """SAC's settings (critic ensemble, learning rates, temperature, augmentation, precision) plus DSRL's own."""

    n_step: int = setting(1, f"n-step returns, {DECISION_STEPS}", low=1)
    critic_updates_per_actor: int = setting(4, "critic updates per actor update (each on a fresh batch)", low=1)
    target_entropy: float | None = setting(
        0.0, "target entropy (null: -|A|/2); DSRL's 0: per noise dimension 0 / (chunk x A)"
    )
    form: str = setting(
        "aliased",
        "aliased: an action critic by TD + a noise critic distilled from it (the paper's default; the "
        "learner runs the base) | noise: plain SAC in noise space (any base, a VLA too)",
        choices=("aliased", "noise"),
    )
    alias_samples: int = setting(
        4,
        "aliased: noises per state regressed onto the action critic (half N(0, I), half the actor's)",
        low=1,
        high=256,
    )


@dataclass
class ResidualConfig:
    """Residual off-policy RL on a frozen base (ResFiT)."""

    batch_size: int = setting(256, "samples per gradient update", low=1)
    n_step: int = setting(3, "n-step returns (ResFiT: 3, 5 on long tasks)", low=1)
    critic_updates_per_actor: int = setting(4, "critic updates per actor update (each on a fresh batch)", low=1)
    gamma: float = setting(0.99, "discount factor", low=0, high=1)
    tau: float = setting(0.005, "target network Polyak rate", above=0, high=1)
    lr_actor: float = setting(1e-4, "residual actor learning rate", above=0, high=1)
    lr_critic: float = setting(SAC_LR, "critic learning rate", above=0, high=1)
    num_critics: int = setting(2, "critics in the ensemble (ResFiT: 10 heads; 2-5 on a 2-core CPU)", low=1)
    critic_subsample: int = setting(2, "critics the TD target takes the min over (at most num_critics)", low=1)
    critic_hidden: tuple[int, ...] = setting((256, 256), "critic MLP widths", low=1)
    critic_layer_norm: bool = setting(True, "LayerNorm in the critics")
    grad_clip_norm: float | None = setting(1.0, "gradient norm clip", above=0)
    target_noise_std: float = setting(
        0.2, "target smoothing noise on the target residual, in units of policy.scale", low=0
    )
    target_noise_clip: float = setting(0.5, "clip of the target noise, in units of policy.scale", low=0)
    actor_start_updates: int = setting(0, "critic-only updates before the residual moves (ResFiT: 10k)", low=0)
    bound_ramp_updates: int = setting(
        0,
        "> 0: the residual's bound grows linearly from 0 to policy.scale over this many actor updates (a young "
        "critic's errors cost only small corrections; exploration keeps the whole bound); 0: the whole bound at once",
        low=0,
    )
    intervention_bc_weight: float = setting(
        0.0, "> 0: pull the residual towards (executed - base) on human-intervention steps", low=0
    )
    residual_l2: float = setting(
        0.0,
        "> 0: actor loss -Q + this * mean((r/s)^2), in Q's units: a correction is made only where the critic's "
        "gain outweighs it",
        low=0,
    )
    target_q_clip: tuple[float, float] | None = setting(None, "clip TD targets to [low, high], the return's range")
    image_augmentation: str | None = setting(
        "random_shift", "DrQ random shift on camera images (null: none)", choices=("random_shift",)
    )
    augment_pad: int = setting(4, "pixels of replicate padding for random_shift", low=0, high=64)
    precision: str = setting("auto", "matrix-product precision (robo_rl/precision.py)", choices=PRECISIONS)


@dataclass
class PPOConfig:
    """PPO over a flow/diffusion policy's denoising chain (ReinFlow, DPPO-style)."""

    rollout_env_steps: int = setting(2000, "env steps of the current policy per PPO iteration (all actors)", low=1)
    gamma: float = setting(0.99, "discount factor", low=0, high=1)
    gae_lambda: float = setting(0.95, "GAE lambda", low=0, high=1)
    clip: float = setting(
        0.01, "the ratio clip (ReinFlow: 0.01, 0.001 from pixels; DPPO: 0.001-0.01)", above=0, below=1
    )
    clip_initial_noise: float | None = setting(
        None,
        "policy.initial_noise=learned: x_0's own ratio clip, a second surrogate beside the steps' (each "
        "sampling stage its own decision, as DPPO treats denoising steps); null: one ratio of the whole chain",
        above=0,
        below=1,
    )
    epochs: int = setting(5, "passes over each rollout", low=1)
    batch_size: int = setting(128, "PPO minibatch", low=1)
    lr_policy: float = setting(3e-5, "policy learning rate", above=0, high=1)
    lr_value: float = setting(1e-3, "value learning rate", above=0, high=1)
    lr_initial_noise: float | None = setting(
        None,
        "policy.initial_noise=learned: the x_0 head's learning rate, a new small head (null: lr_policy)",
        above=0,
        high=1,
    )
    entropy_coef: float = setting(0.0, "entropy bonus", low=0)
    value_coef: float = setting(0.5, "value loss weight", low=0)
    value_hidden: tuple[int, ...] = setting((256, 256), "value network widths", low=1)
    log_ratio_clamp: float = setting(
        5.0, "bound on |log pi_new - log pi_old| (long chains' log-probabilities are large)", above=0
    )
    grad_clip_norm: float | None = setting(1.0, "gradient norm clip", above=0)
    target_kl: float | None = setting(
        None, "a minibatch past this approximate KL is skipped before backward and the iteration's epochs stop", above=0
    )
    skip_log_ratio: float | None = setting(
        5.0,
        "a minibatch where any |log pi_new - log pi_old| (before log_ratio_clamp) exceeds this is skipped before "
        "backward and counted (null: never)",
        above=0,
    )
    log_prob_tolerance: float | None = setting(
        1e-3,
        "before an iteration's first update: the most the data's log pi recomputed at the actor's and at the "
        "minibatch's batch shape may differ from the recorded one; more is an error (null: unchecked)",
        above=0,
    )
    value_warmup_iterations: int = setting(
        0,
        "first iterations that train the value only, the policy unchanged (DPPO's and ReinFlow's critic warm-up: "
        "a fresh value's advantages would move the policy at random)",
        low=0,
    )
    bootstrap_truncated: bool = setting(
        True,
        "an episode cut by the time limit continues in gamma*V(last observation); false: its future is 0 "
        "(success must come within the episode, e.g. a sparse 0/1 task)",
    )
    advantage: str = setting(
        "gae",
        "gae | critic: A(s, a) = Q(s, a) - E_pi Q(s, .) from an action critic trained by TD on every decision "
        "so far (robo_rl/algos/chain_critic.py); V(s) is still fitted | group: GRPO, each episode's outcome against "
        "its group's (robo_rl/algos/grpo.py), no value network; the actor needs group_resets in actor.wrappers",
        choices=("gae", "critic", "group"),
    )
    group_size: int = setting(
        8, "advantage=group: episodes per group, each reset from the group's env seed (GRPO's G)", low=2, high=256
    )
    group_outcome: str = setting(
        "success",
        "advantage=group: what compares a group's episodes: success (at the episode's end) | return (its summed "
        "reward)",
        choices=("success", "return"),
    )
    group_std_eps: float = setting(1e-6, "advantage=group: A = (outcome - group mean) / (group std + this)", above=0)
    clip_high: float | None = setting(
        None,
        "the ratio's upper clip, 1 + clip_high, at least clip (DAPO's and SimpleVLA-RL's clip-higher: 0.28 beside "
        "clip 0.2 leaves unlikely chunks room to grow); null: 1 + clip",
        above=0,
    )
    critic_updates: int = setting(500, "advantage=critic: TD steps per iteration", low=1)
    critic_batch_size: int = setting(256, "advantage=critic: TD minibatch", low=1)
    critic_hidden: tuple[int, ...] = setting((256, 256), "advantage=critic: Q network widths", low=1)
    critic_ensemble: int = setting(2, "advantage=critic: Q networks averaged", low=1)
    lr_critic: float = setting(SAC_LR, "advantage=critic: Q learning rate", above=0, high=1)
    critic_tau: float = setting(0.005, "advantage=critic: target network Polyak rate", above=0, high=1)
    critic_samples: int = setting(
        8, "advantage=critic: the chain's chunks per state for the baseline E_pi Q(s, .)", low=1
    )
    critic_buffer: int = setting(200_000, "advantage=critic: decisions kept for TD (oldest dropped first)", low=1)
    critic_target_clip: tuple[float, ...] | None = setting(
        None, "advantage=critic: clip TD targets to [low, high] ([0, 1] for a 0/1 success reward)", length=2
    )


# The builder named by an algo block's `_target_` -> the dataclass its keys are checked against and built into.
ALGO_CONFIGS: dict[str, type] = {
    "robo_rl.algos.sac.build_sac": SACConfig,
    "robo_rl.algos.gripper.build_sac_gripper": SACGripperConfig,
    "robo_rl.algos.residual.build_residual": ResidualConfig,
    "robo_rl.algos.dsrl.build_dsrl": DSRLConfig,
    "robo_rl.algos.ppo.build_ppo": PPOConfig,
    "robo_rl.algos.parl.build_parl": ParlConfig,
}
