"""PA-RL's settings (`algo=parl`, `policy=parl`) and RL-100's offline-evaluation gate (`robo-rl gate`): one typed field
each, with its default, range and meaning. Registered by `configs/algo.py` and `configs/policy.py`; no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from robo_rl.configs.typed import setting

SAC_LR = 3e-4
STATE_NORM = "base: the critic reads the state normalised by the base's training statistics | none: raw"


@dataclass
class ParlConfig:
    """PA-RL's learner: a chunk critic by TD on the executed chunks, the picked chunks distilled into the base."""

    batch_size: int = setting(256, "decisions per gradient update", low=1)
    critic_updates: int = setting(1, "critic updates per round, each on a fresh batch", low=1)
    gamma: float = setting(0.99, "discount per env step (a chunk of E steps is discounted by gamma^E)", low=0, high=1)
    tau: float = setting(0.005, "target critic Polyak rate", above=0, high=1)
    lr_critic: float = setting(SAC_LR, "critic learning rate", above=0, high=1)
    lr_base: float = setting(3e-4, "the base's learning rate while distilling", above=0, high=1)
    critic_subsample: int = setting(2, "critics the TD target takes the min over (at most policy.critics)", low=1)
    target_samples: int = setting(
        8, "chunks the base samples at the next state; the target critic's best is the backup's", low=1, high=4096
    )
    target_from: str = setting(
        "sampled",
        "sampled: target_samples fresh base chunks at each batch's next states, every update | recorded: the "
        "policy.record_candidates chunks the actor sampled at the next decision, no base call in the learner but "
        "once per time-limit end (a VLA base: ~0.1 s a sample on a CPU)",
        choices=("sampled", "recorded"),
    )
    distill_every: int = setting(
        2,
        "rounds between distillation steps of the base (0: never; a LeRobot base is not distilled). Pick task, 4k env "
        "steps, one seed: every 10 at lr 1e-4 left the base alone at 0.38 (BC: 0.34); every 2 at 3e-4 took it to 0.86",
        low=0,
    )
    distill_steps: int = setting(1, "gradient steps on the base at each distillation, each on a round's batch", low=1)
    distill_target: str = setting(
        "recorded",
        "recorded: the chunks the actors picked (extra/chosen; demonstrations: their own actions) | reranked: the "
        "current critic's best of policy.samples fresh base chunks at the batch's states",
        choices=("recorded", "reranked"),
    )
    grad_clip_norm: float | None = setting(10.0, "gradient norm clip (critic and base)", above=0)
    target_q_clip: tuple[float, ...] | None = setting(
        None, "clip TD targets to [low, high], the return's range ([0, 1] for a 0/1 reward)", length=2
    )


@dataclass
class ParlPolicyConfig:
    """`policy=parl`: a stochastic base's N chunks, the one a chunk critic values most executed (PA-RL)."""

    blocks: ClassVar[tuple[str, ...]] = ("base", "encoder")

    samples: int = setting(
        16, "chunks sampled from the base and ranked by the critic at each decision", low=1, high=4096
    )
    execute_steps: int | None = setting(None, "actions run from each chunk; overrides base.execute_steps", low=1)
    action_grad_steps: int = setting(
        0, "gradient steps up Q on each candidate's executed actions before the pick (PA-RL's local step)", low=0
    )
    action_grad_lr: float = setting(0.01, "size of each such step, in normalised action units", above=0, high=1)
    critics: int = setting(2, "critics in the chunk critic's ensemble", low=1, high=64)
    critic_hidden: tuple[int, ...] = setting((256, 256), "critic MLP widths", low=1)
    critic_layer_norm: bool = setting(True, "LayerNorm in the critics")
    state_norm: str = setting("none", f"the critic: {STATE_NORM}", choices=("none", "base"))
    noise_scale: float = setting(
        1.0,
        "the std of the initial noise the base's chunks are sampled from: 1 its own distribution, below 1 nearer its "
        "mode (0: every sample is the mode). A flow trained on few noisy demonstrations is often better at its mode",
        low=0,
        high=4,
    )
    record_candidates: int = setting(
        0,
        "the first K of each decision's base samples kept in its record (their executed parts), for "
        "algo.target_from=recorded (0: none)",
        low=0,
        high=4096,
    )


@dataclass
class GateConfig:
    """`robo-rl gate`: accept a candidate policy only when fitted Q evaluation on held-out episodes says it beats the
    current one by a margin (RL-100's gate)."""

    margin: float = setting(
        0.05, "the candidate's estimated return must exceed the current policy's by more than this", low=0
    )
    held_out: float = setting(
        1.0,
        "share of the data's episodes FQE fits on and starts from: the newest ones (which a policy improved on the "
        "older ones has not seen); 1: all",
        above=0,
        high=1,
    )
    gamma: float = setting(0.99, "discount per env step", low=0, high=1)
    fqe_steps: int = setting(2000, "FQE gradient steps per policy", low=1)
    fqe_batch_size: int = setting(256, "FQE minibatch (decisions)", low=1)
    fqe_lr: float = setting(SAC_LR, "FQE learning rate", above=0, high=1)
    fqe_hidden: tuple[int, ...] = setting((256, 256), "FQE Q network widths", low=1)
    fqe_tau: float = setting(0.005, "FQE target network Polyak rate", above=0, high=1)
    seed: int = setting(0, "seed of the FQE fits (the same data and seed give the same estimates)", low=0)
    eval_episodes: int = setting(
        0, "> 0 in sim: also run both policies for this many episodes and record whether the gate's call agreed", low=0
    )
