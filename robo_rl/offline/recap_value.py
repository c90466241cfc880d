"""RECAP's value: a distribution over the normalised return, and STEAM's replacement for it.

RECAP (π*0.6, Physical Intelligence 2025) fits V(s) as a categorical distribution over B bins spanning the return's
range [-1, 0] (RLinf: 201 bins), trained by cross-entropy against the return spread over its two neighbouring bins
(the "two-hot" target, so that the expectation of the target is the return itself); V(s) is the expectation. Here
the distribution sits on our observation encoder (policies/encoders.py: the state, and camera features where asked).
A VLA's features plug in the same way: any module with `forward(obs) -> [B, D]` and `out_dim` can be the encoder
(`CategoricalValue(encoder=...)`); SmolVLA's are too heavy for this CPU, so only the small encoder is tested.

STEAM (RLinf) replaces the return regression with a pairwise progress critic (robo_rl/rewards/progress.py) trained
N times with different seeds: the progress from s_t to s_t+N that the worst critic sees is the pessimistic stand-in
for V(s_t+N) − V(s_t).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from policies.encoder_config import EncoderConfig
from policies.encoders import ObservationEncoder
from policies.mlp import mlp
from policies.state_norm import NORMALISED_CLIP, set_normalisation

VALUE_FORMAT = 1


def two_hot(returns: torch.Tensor, bins: int) -> torch.Tensor:
    """[B, bins] targets: each return in [-1, 0] split between its two nearest bin centres, linearly."""
    position = (returns.clamp(-1.0, 0.0) + 1.0) * (bins - 1)
    low = position.floor().long().clamp(0, bins - 1)
    high = (low + 1).clamp(max=bins - 1)
    upper = position - low.float()
    target = torch.zeros(len(returns), bins, device=returns.device)
    target.scatter_add_(1, low[:, None], (1.0 - upper)[:, None])
    target.scatter_add_(1, high[:, None], upper[:, None])
    return target


class CategoricalValue(nn.Module):
    """Logits over `bins` return values evenly spaced on [-1, 0]; `forward` gives their expectation, V(s)."""

    def __init__(
        self,
        state_dim: int,
        cameras: dict[str, list[int]] | None = None,
        bins: int = 201,
        hidden: list[int] = (256, 256),
        encoder: dict | None = None,
        features: nn.Module | None = None,  # a VLA's (or any) feature module instead of our encoder: the hook
    ) -> None:
        super().__init__()
        self.config = {
            "state_dim": int(state_dim),
            "cameras": {n: [int(h), int(w)] for n, (h, w) in (cameras or {}).items()},
            "bins": int(bins),
            "hidden": [int(h) for h in hidden],
            "encoder": dict(encoder) if cameras and encoder else None,
        }
        cams = {n: tuple(s) for n, s in self.config["cameras"].items()}
        self.encoder = features or ObservationEncoder(
            state_dim, cams, config=EncoderConfig.parse(self.config["encoder"])
        )
        self.head = mlp(self.encoder.out_dim, list(hidden), bins, layer_norm=True)
        self.register_buffer("support", torch.linspace(-1.0, 0.0, bins))
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    set_normalisation = set_normalisation

    def logits(self, obs: dict) -> torch.Tensor:
        state = ((obs["state"] - self.state_mean) / self.state_std).clamp(-NORMALISED_CLIP, NORMALISED_CLIP)
        images = {name: obs["images"][name] for name in self.config["cameras"]}
        return self.head(self.encoder({**obs, "state": state, "images": images}))  # a VLA's reads the instruction too

    def forward(self, obs: dict) -> torch.Tensor:
        return (F.softmax(self.logits(obs), dim=-1) * self.support).sum(-1)

    def loss(self, obs: dict, returns: torch.Tensor) -> torch.Tensor:
        """Cross-entropy against the two-hot target of the (normalised) returns."""
        target = two_hot(returns, len(self.support))
        return -(target * F.log_softmax(self.logits(obs), dim=-1)).sum(-1).mean()

    def checkpoint(self, **extra) -> dict:
        weights = {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}
        return {"format": VALUE_FORMAT, "kind": "recap_value", "config": self.config, "weights": weights, **extra}


def observation_rows(states: np.ndarray, images: dict[str, np.ndarray], rows: np.ndarray, device) -> dict:
    """The observation batch of `rows` as tensors (images stay uint8 until the encoder)."""
    return {
        "state": torch.from_numpy(np.ascontiguousarray(states[rows])).to(device),
        "images": {n: torch.from_numpy(np.ascontiguousarray(v[rows])).to(device) for n, v in images.items()},
    }


def fit_value(
    states: np.ndarray,
    images: dict[str, np.ndarray],
    returns: np.ndarray,
    settings,
    device="cpu",
    progress: bool = True,
) -> tuple[CategoricalValue, dict]:
    """A categorical value fitted to (observation, normalised return) rows by Adam on the cross-entropy; the same
    seed and data give the same weights. Returns it and the fit's summary (its final loss and mean absolute error)."""
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    cams = {n: list(v.shape[1:3]) for n, v in images.items()}
    model = CategoricalValue(states.shape[1], cams, settings.bins, list(settings.value_hidden)).to(device)
    model.set_normalisation(states)
    optimiser = torch.optim.Adam(model.parameters(), lr=settings.value_lr)
    target = torch.from_numpy(returns.astype(np.float32)).to(device)
    losses = []
    for _ in tqdm(range(settings.value_steps), desc="value fit", unit="step", disable=not progress):
        rows = rng.integers(0, len(states), min(settings.value_batch_size, len(states)))
        loss = model.loss(observation_rows(states, images, rows, device), target[rows])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    model.eval()
    values = predict_values(model, states, images, device)
    summary = {
        "final_loss": float(np.mean(losses[-50:])),
        "mean_abs_error": float(np.abs(values - returns).mean()),
        "rows": int(len(states)),
    }
    return model, summary


@torch.no_grad()
def predict_values(model: CategoricalValue, states: np.ndarray, images: dict, device="cpu", batch: int = 4096):
    """V(s) of every row, float64."""
    model.eval()
    out = [
        model(observation_rows(states, images, np.arange(lo, min(lo + batch, len(states))), device)).cpu().numpy()
        for lo in range(0, len(states), batch)
    ]
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


# --- STEAM: the pairwise progress critic, an ensemble, the worst of it ---------------------------------------------
def pessimistic_progress(critics, frames: dict, later: dict, instruction: str) -> np.ndarray:
    """Per row, the smallest progress any critic sees from `frames` to `later` (camera → uint8 [n, H, W, 3])."""
    from robo_rl.rewards.base import Task

    seen = [np.asarray(c.score(later, Task(instruction), previous=frames).delta, np.float64) for c in critics]
    return np.min(np.stack(seen), axis=0)


def train_critic_ensemble(episodes, instructions, cameras, settings, progress: bool = True) -> list:
    """`settings.critics` progress critics on the same episodes, each from its own seed (a deep ensemble)."""
    from robo_rl.rewards.progress import train_progress_critic

    return [
        train_progress_critic(
            episodes,
            cameras,
            instructions,
            steps=settings.critic_steps,
            seed=settings.seed + i,
            progress=progress,
        )
        for i in range(settings.critics)
    ]
