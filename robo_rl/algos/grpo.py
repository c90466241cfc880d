"""Group-relative advantages (GRPO, as SimpleVLA-RL applies it to VLAs): no value network; an episode is judged
against the other episodes that started from the same initial state under the same policy.

For a group of G episodes with outcomes o_1..o_G (each one's success, or its return), every decision of episode i
gets A_i = (o_i − mean(o)) / (std(o) + eps). The mean and the standard deviation are over the group's episodes, not
over their decisions (a long episode is one outcome like a short one), and the standard deviation is the population
one (ddof 0): in a group of 8 with 2 successes, mean 0.25 and std 0.433, a success's advantage is 1.73 and a
failure's −0.577. A group whose outcomes are all equal gives 0 everywhere; the rollout drops such groups before they
get here (`robo_rl/data/group_rollout.py`).
"""

from __future__ import annotations

import torch


def group_advantages(
    outcome: torch.Tensor, group: torch.Tensor, episode: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """Each row's advantage from its episode's `outcome`, given each row's `group` and `episode` index (0..n-1, every
    row of an episode carrying the same outcome and group)."""
    outcome, group, episode = outcome.float(), group.long(), episode.long()
    n_episodes, n_groups = int(episode.max()) + 1, int(group.max()) + 1
    per_episode = torch.zeros(n_episodes, device=outcome.device).scatter_(0, episode, outcome)
    episode_group = torch.zeros(n_episodes, dtype=torch.long, device=outcome.device).scatter_(0, episode, group)
    count = torch.bincount(episode_group, minlength=n_groups).float()
    mean = torch.zeros(n_groups, device=outcome.device).index_add_(0, episode_group, per_episode) / count
    spread = (per_episode - mean[episode_group]) ** 2
    std = (torch.zeros(n_groups, device=outcome.device).index_add_(0, episode_group, spread) / count).sqrt()
    return (outcome - mean[group]) / (std[group] + eps)
