"""`robo-rl recap`: advantage-conditioned improvement (RECAP, π*0.6; STEAM's progress-critic value), its settings.

Given on the command line as `recap.<name>=<value>` (robo_rl/commands/recap.py); each refused in one line when out of
range.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_rl.configs.typed import setting

VALUES = ("returns", "steam")


@dataclass
class RecapConfig:
    """RECAP's labels (returns, value, advantages, indicator) and its conditioned fine-tune."""

    value: str = setting(
        "returns",
        "returns: a categorical value regressed on the episodes' returns (RECAP); steam: a pessimistic ensemble of "
        "pairwise progress critics (STEAM, needs cameras)",
        choices=VALUES,
    )
    max_episode_steps: int | None = setting(
        None, "the task's longest episode, the returns' scale (null: the longest episode in the data)", low=1
    )
    failure_penalty: float | None = setting(
        None, "the return a failed end adds, as a negative number of steps (null: max_episode_steps)", low=0
    )
    bins: int = setting(201, "bins of the categorical value over the normalised return range [-1, 0]", low=2)
    value_images: bool = setting(False, "the value also sees the data's cameras (a CNN per camera; slower on a CPU)")
    value_hidden: tuple[int, ...] = setting((256, 256), "the value head's MLP widths", low=1)
    value_steps: int = setting(3000, "gradient steps of the value fit", low=1)
    value_batch_size: int = setting(256, "observations per value gradient step", low=1)
    value_lr: float = setting(0.0003, "the value fit's Adam learning rate", above=0, high=1)
    n_step: int = setting(10, "N of the advantage A = sum of N rewards + V(s_t+N) - V(s_t)", low=1)
    positive_share: float = setting(
        0.3, "share of the labelled actions (per instruction) whose advantage counts as positive", above=0, below=1
    )
    interventions_positive: bool = setting(True, "a human's corrective actions are labelled positive (π*0.6)")
    critics: int = setting(3, "steam: progress critics in the ensemble (the value is the worst of them)", low=1)
    critic_steps: int = setting(1500, "steam: gradient steps of each progress critic", low=1)
    cfg_dropout: float = setting(
        0.1, "share of training rows whose label is dropped (classifier-free guidance)", low=0, below=1
    )
    guidance: float = setting(1.0, "guidance scale w when acting (1: conditional on positive, 0: unconditional)", low=0)
    embedding: int = setting(16, "width of the learned label embedding appended to the policy's features", low=1)
    updates: int = setting(3000, "gradient steps of the conditioned fine-tune", low=1)
    batch_size: int = setting(256, "chunks per fine-tune gradient step", low=1)
    lr: float = setting(0.0003, "the fine-tune's Adam learning rate", above=0, high=1)
    seed: int = setting(0, "seed of the value fit, the fine-tune and their sampling", low=0, high=2**32 - 1)
