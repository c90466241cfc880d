"""Advantage conditioning for a chunk generator (RECAP, π*0.6: Physical Intelligence, "π*0.6: a VLA that learns
from experience", 2025, section IV): the policy is told whether the action it is asked for was better than the
policy's usual one ("advantage positive"), worse ("negative"), or is not told ("dropped"), and at acting time it is
steered towards the positive one with classifier-free guidance (Ho & Salimans, 2022):

    v = v_dropped + w · (v_positive − v_dropped),  computed as (1 − w)·v_dropped + w·v_positive

so that w = 1 is the conditional model and w = 0 the unconditional one exactly (no rounding from the difference).

Two forms of the same idea: a learned embedding of the three labels appended to a flow policy's features
(`AdvantageEmbedding`, used by policies/flow.py), and, for a VLA that reads its instruction as text, the label as a
sentence appended to the prompt (`advantage_prompt`, `PromptGuidance`).
"""

from __future__ import annotations

import torch
from torch import nn

POSITIVE, NEGATIVE, DROPPED = 0, 1, 2
LABELS = ("positive", "negative", "dropped")
ADVANTAGE_KEY = "advantage"  # an observation batch's [B] label ids (absent: acting, i.e. asking for "positive")


def guided(v_conditional: torch.Tensor, v_unconditional: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance of two predictions (velocities or noises); exact at scale 0 and 1."""
    if scale == 1.0:
        return v_conditional
    if scale == 0.0:
        return v_unconditional
    return (1.0 - scale) * v_unconditional + scale * v_conditional


class AdvantageEmbedding(nn.Module):
    """A learned vector per label, appended to the observation features. Its vectors start random and a base that
    gains it starts with zero weights on them (robo_rl/offline/recap_train.py), so it acts as before and the labels
    still get a gradient (had both started at zero, neither would move)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"the advantage embedding needs a positive width, got {width}")
        self.width = int(width)
        self.table = nn.Embedding(len(LABELS), self.width)

    def forward(self, obs: dict, batch: int, device: torch.device) -> torch.Tensor:
        """[B, width]: each row's label (obs["advantage"], ids 0/1/2), positive where the batch carries none."""
        ids = obs.get(ADVANTAGE_KEY) if isinstance(obs, dict) else None
        if ids is None:
            ids = torch.full((batch,), POSITIVE, dtype=torch.long, device=device)
        ids = torch.as_tensor(ids, dtype=torch.long, device=device).reshape(-1)
        if len(ids) != batch or bool(((ids < 0) | (ids >= len(LABELS))).any()):
            raise ValueError(f"obs['advantage'] must hold {batch} label ids in 0..{len(LABELS) - 1}")
        return self.table(ids)

    def swap_to(self, features: torch.Tensor, label: int) -> torch.Tensor:
        """The same features with the appended label replaced by `label` (the unconditional pass of guidance)."""
        row = self.table.weight[label].expand(len(features), -1)
        return torch.cat([features[:, : -self.width], row], dim=-1)


def dropped_labels(labels: torch.Tensor, rate: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """The training labels with each one replaced by "dropped" with probability `rate` (the CFG dropout)."""
    drop = torch.rand(labels.shape, generator=generator, device=labels.device) < rate
    return torch.where(drop, torch.full_like(labels, DROPPED), labels)


# --- a VLA that reads its instruction: the label as text ------------------------------------------------------------
def advantage_prompt(instruction: str | None, label: int) -> str:
    """The task prompt with the label as a sentence after it ("pick the cube. Advantage: positive"); "dropped" is the
    plain prompt, which is what an unconditional pass reads."""
    if label not in (POSITIVE, NEGATIVE, DROPPED):
        raise ValueError(f"advantage label must be one of 0, 1, 2 ({', '.join(LABELS)}), got {label}")
    base = (instruction or "").strip()
    if label == DROPPED:
        return base
    sentence = f"Advantage: {LABELS[label]}"
    return f"{base}. {sentence}" if base and not base.endswith(".") else f"{base} {sentence}".strip()


def labelled_prompts(
    instructions: list[str | None], labels, rate: float, generator: torch.Generator | None = None
) -> list[str]:
    """Per training row, the prompt a VLA is fine-tuned on: its instruction with its label (positive / negative),
    or the plain instruction for the rows whose label the CFG dropout drops (probability `rate`)."""
    given = dropped_labels(torch.as_tensor(labels, dtype=torch.long), rate, generator)
    return [advantage_prompt(text, int(label)) for text, label in zip(instructions, given.tolist(), strict=True)]


class PromptGuidance:
    """Guided sampling for a generator whose features read the instruction (a SmolVLA through policies/vla_flow.py,
    or any object with `features(obs)` and `predict(features, x, t)`): the features are computed twice, once for the
    prompt with "Advantage: positive" and once for the plain prompt, and the two predictions combined by `guided`.
    The sampler is the generator's own Euler loop (flow time 0 → 1 in `steps` steps)."""

    def __init__(self, generator, scale: float = 1.0) -> None:
        self.generator, self.scale = generator, float(scale)

    def features(self, obs: dict) -> tuple:
        rows = obs.get("instruction") or [None]
        positive = dict(obs, instruction=[advantage_prompt(r, POSITIVE) for r in rows])
        plain = dict(obs, instruction=[advantage_prompt(r, DROPPED) for r in rows])
        cond = self.generator.features(positive) if self.scale != 0.0 else None
        uncond = self.generator.features(plain) if self.scale != 1.0 else None
        return cond, uncond

    def predict(self, features: tuple, x: torch.Tensor, t) -> torch.Tensor:
        cond, uncond = features
        v_c = self.generator.predict(cond, x, t) if cond is not None else None
        v_u = self.generator.predict(uncond, x, t) if uncond is not None else None
        return guided(v_c if v_c is not None else v_u, v_u if v_u is not None else v_c, self.scale)

    @torch.no_grad()
    def sample(self, obs: dict, noise: torch.Tensor, steps: int) -> torch.Tensor:
        features, x = self.features(obs), noise
        for k in range(steps):
            x = x + self.predict(features, x, k / steps) / steps
        return x
