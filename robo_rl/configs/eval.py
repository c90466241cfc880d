"""The evaluation and offline-training blocks (`eval`, `bc`, `distill`): one typed field per setting, with its default,
range and meaning, the only place they are written. `launch/conf/config.yaml` does not repeat them and
`launch/conf/bc/default.yaml` is empty; an experiment's YAML sets what differs. Figures behind the defaults:
BENCHMARKS.md ("Base policies", "Flow and diffusion fine-tuning").
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_rl.configs.typed import FIXED, setting

SCORES = ("env", "human")  # who judges an evaluation's success; never the reward model the policy was trained on
SELECT_RULES = ("lower_bound", "point_estimate", "last")  # robo_rl/eval/select.py


@dataclass
class EvalConfig:
    """`robo-rl eval` (and the evaluation after `robo-rl train`): seeded episodes, suites, films."""

    episodes: int = setting(50, "evaluation episodes", low=1)
    seed: int = setting(
        1000000, "first evaluation seed (seeds are seed, seed+1, ...: the same set for every run)", low=0
    )
    video: bool = setting(False, "film evaluation episodes: an MP4 each in the report's videos/, linked from report.md")
    video_episodes: int = setting(3, "episodes filmed (plus the first success and failure when those lack one)", low=0)
    suite: str | None = setting(
        None, "a suite of conditions to evaluate on (launch/conf/suite/<name> or a .yaml; `suite=<name>` for short)"
    )
    workers: int = setting(
        1, "env processes a suite's episodes run in (a real robot or a person scoring: 1)", low=1, high=64
    )
    score: str = setting(
        "env", "who judges success: the env's own check or a person's labels (never the reward model)", choices=SCORES
    )
    select: str = setting(
        "lower_bound",
        "which of a run's evaluated checkpoints its report stands for: the highest Wilson lower bound, the highest "
        "rate, or the newest (robo_rl/eval/select.py)",
        choices=SELECT_RULES,
    )


@dataclass
class BCConfig:
    """`robo-rl bc`: behaviour cloning of a base policy (an MLP, or policy=flow | diffusion) from demonstrations."""

    chunk_size: int = setting(1, "actions the BC MLP predicts per inference (1: closed loop)", low=1, high=1000)
    execute_steps: int | None = setting(
        None, "actions of each BC chunk run open-loop before the next inference (null: the whole chunk)", low=1
    )
    hidden: tuple[int, ...] = setting((256, 256), "BC policy MLP widths", low=1)
    epochs: int = setting(300, "BC passes over the training episodes (early stopping usually ends sooner)", low=1)
    patience: int = setting(30, "BC stops after this many epochs without a better validation loss", low=1)
    diffusion_updates: int = setting(
        10000, "a diffusion policy's BC gradient steps at least, epochs and patience aside (BENCHMARKS.md)", low=0
    )
    flow_updates: int = setting(
        6000, "a flow policy's BC gradient steps at least, epochs and patience aside (BENCHMARKS.md)", low=0
    )
    batch_size: int = setting(256, "BC samples per gradient step", low=1)
    lr: float = setting(0.001, "BC Adam learning rate", above=0, high=1)
    weight_decay: float = setting(0.0, "BC Adam weight decay", low=0)
    val_fraction: float = setting(
        0.2, "share of demonstration episodes held out for the validation loss (whole episodes)", low=0, high=1
    )
    images: bool = setting(False, "BC uses camera features (the encoder of policy.encoder) besides the state")
    eval_episodes: int = setting(
        50, "sim episodes that evaluate the BC policy after training (seeds from eval.seed)", low=0
    )


@dataclass
class DistillConfig:
    """`robo-rl distill`: a flow/diffusion policy (or a DSRL run) regressed into a one-step flow student."""

    iterations: int | None = setting(
        10000,
        "distill: regression steps of the student onto the teacher's chunks (null, as older runs saved it: this "
        "default; why this many: BENCHMARKS.md, one-step distillation)",
        low=1,
    )
    batch_size: int = setting(256, "distill: states per step", low=1)
    lr: float = setting(0.0003, "distill: Adam learning rate", above=0, high=1)
    rollout_episodes: int = setting(
        30, "distill: teacher rollouts in the sim whose states join the demonstrations' (0: demos only)", low=0
    )
    eval_episodes: int = setting(
        50, "distill: evaluation episodes of teacher and student on the same seeds (eval.seed ...; 0: none)", low=0
    )


BLOCKS: dict[str, dict[str | None, type]] = {
    "eval": {FIXED: EvalConfig},
    "bc": {FIXED: BCConfig},
    "distill": {FIXED: DistillConfig},
}
