"""Frozen state-only bases for one observation at a time, in numpy: the actor's fast path.

An actor asks its base for one chunk at a time (batch 1) between env steps. At that size a call is almost all
per-operation overhead, torch's larger than numpy's, and after the simulator's step has evicted the caches each
operation pays again. This runs the arithmetic of a flow/diffusion policy's sampler (`ChunkGenerator.features` and
`.sample`: `CpuSampler`) and of an MLP BC policy (`BCPolicy.forward`: `CpuMLPPolicy`) in numpy with fewer
operations: each LayerNorm's centring is folded into the Linear before it (centring is linear), the flow's 1/K into
the last Linear, and what does not depend on the observation (time embeddings, DDIM's √ᾱ) is computed once. Results
agree with torch's to float32 rounding (tests/test_flow.py, tests/test_bc.py); `bench/flow.py` times both.

It covers state-only models (normalised state → MLP of Linear / LayerNorm / ReLU) on the CPU in float32; `build`
returns None for anything else (cameras, an encoder that normalises again, another device or dtype) and the caller
keeps torch. The folded weights are a snapshot: `current` says whether the model's tensors are unchanged since
(torch's version counters), so weights loaded in place are picked up.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from policies.state_norm import NORMALISED_CLIP


class _Snapshot:
    """Folded numpy copies of a frozen model's weights, with what tells whether they are still the model's."""

    def __init__(self, model) -> None:
        self._tensors = [*model.parameters(), *model.buffers()]
        self._versions = self._read_versions()
        self.shift = model.state_mean.detach().numpy().copy()
        self.inv_std = (1.0 / model.state_std.detach().double().numpy()).astype(np.float32)

    @staticmethod
    def supported(model, net: nn.Module) -> bool:
        """A state-only model on the CPU in float32 whose network is Linear / LayerNorm / ReLU, Linear at both ends."""
        encoder = model.encoder
        if encoder.cameras or encoder.state_normalised:
            return False
        if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in (*model.parameters(), *model.buffers())):
            return False
        layers = list(net)
        return (
            bool(layers)
            and all(isinstance(layer, nn.Linear | nn.LayerNorm | nn.ReLU) for layer in layers)
            and isinstance(layers[0], nn.Linear)
            and isinstance(layers[-1], nn.Linear)
        )

    def _read_versions(self) -> tuple[int, ...]:
        return tuple(t._version for t in self._tensors)

    def current(self, model) -> bool:
        """Whether this snapshot still is `model`: no tensor changed in place since it was taken."""
        return self._read_versions() == self._versions

    def normalised(self, state) -> np.ndarray:
        s = np.asarray(state, np.float32).reshape(-1) - self.shift
        s *= self.inv_std
        _clip(s, NORMALISED_CLIP)
        return s


class NumpyMLP:
    """`policies.mlp.mlp(...)` (Linear [LayerNorm] [ReLU] blocks) for one input vector, each LayerNorm's centring
    folded into the Linear before it; `out_scale` multiplies the output (folded into the last Linear)."""

    def __init__(self, net: nn.Module, out_scale: float = 1.0) -> None:
        f64 = lambda t: t.detach().double().numpy()  # noqa: E731 — folded in double precision, kept in float32
        blocks: list[list] = []  # [weight [in, out], bias, LayerNorm (weight, bias, eps) or None, relu]
        for layer in net:
            if isinstance(layer, nn.Linear):
                blocks.append([f64(layer.weight).T, f64(layer.bias), None, False])
            elif isinstance(layer, nn.LayerNorm):
                w, b = blocks[-1][0], blocks[-1][1]
                blocks[-1][0], blocks[-1][1] = w - w.mean(1, keepdims=True), b - b.mean()  # centred
                blocks[-1][2] = (f64(layer.weight), f64(layer.bias), float(layer.eps))
            else:
                blocks[-1][3] = True
        blocks[-1][0], blocks[-1][1] = blocks[-1][0] * out_scale, blocks[-1][1] * out_scale
        self.blocks = []
        for weight, bias, norm, relu in blocks:
            if norm is not None:
                norm = (norm[0].astype(np.float32), norm[1].astype(np.float32), norm[2])
            self.blocks.append((np.ascontiguousarray(weight, np.float32), bias.astype(np.float32), norm, relu))

    def __call__(self, h: np.ndarray) -> np.ndarray:
        for weight, bias, norm, relu in self.blocks:
            h = h @ weight
            h += bias
            if norm is not None:  # h is already centred (folded): scale by 1/std, then LayerNorm's affine
                h *= norm[0] * (1.0 / math.sqrt(float(np.dot(h, h)) / h.size + norm[2]))
                h += norm[1]
            if relu:
                np.maximum(h, 0.0, out=h)
        return h


class CpuMLPPolicy(_Snapshot):
    """`BCPolicy` (normalised state → LayerNorm MLP → tanh) for one observation: its chunk [chunk, A]."""

    def __init__(self, policy) -> None:
        super().__init__(policy)
        self.shape, self.net = (policy.chunk_size, policy.action_dim), NumpyMLP(policy.head)

    @classmethod
    def build(cls, policy) -> CpuMLPPolicy | None:
        return cls(policy) if cls.supported(policy, policy.head) else None

    def chunk(self, state) -> np.ndarray:
        return np.tanh(self.net(self.normalised(state))).reshape(self.shape)


class CpuSampler(_Snapshot):
    """`ChunkGenerator`'s sampler for one observation: the chunk its K steps make of a given noise."""

    def __init__(self, model) -> None:
        super().__init__(model)
        self.kind, self.shape, self.steps = model.kind, tuple(model.noise_shape), int(model.steps)
        # flow: x + v/K, the 1/K folded into the velocity's last layer
        self._net = NumpyMLP(model.net, 1.0 / self.steps if self.kind == "flow" else 1.0)
        self._freqs = model.time_freqs.detach().numpy()
        self.plan = self._plan(model)

    @classmethod
    def build(cls, model) -> CpuSampler | None:
        return cls(model) if cls.supported(model, model.net) else None

    def current(self, model) -> bool:
        """Whether this snapshot still is `model`: the same step count and no tensor changed in place since."""
        return self.steps == model.steps and super().current(model)

    def _embedding(self, t: float) -> np.ndarray:
        angles = np.float32(t) * self._freqs  # as torch computes it: float32 t times float32 frequencies
        return np.concatenate([np.sin(angles), np.cos(angles)]).astype(np.float32)

    def _plan(self, model) -> list[tuple]:
        """Per sampling step, what does not depend on the observation: its time embedding and, for DDIM, the √ᾱ."""
        if self.kind == "flow":
            return [(self._embedding(k / self.steps), None) for k in range(self.steps)]
        timesteps = model.ddim_timesteps(model.steps)
        T = len(model.alpha_bar)
        ab = [float(model.alpha_bar[k - 1]) for k in timesteps] + [None]
        return [
            (
                self._embedding(k / T),
                (
                    math.sqrt(ab[i]),
                    math.sqrt(1 - ab[i]),
                    None if ab[i + 1] is None else math.sqrt(ab[i + 1]),
                    None if ab[i + 1] is None else math.sqrt(1 - ab[i + 1]),
                ),
            )
            for i, k in enumerate(timesteps)
        ]

    def sample(self, state, noise: np.ndarray) -> np.ndarray:
        """The chunk [chunk, A] (float32, in [-1, 1]) that the model's sampler makes of `noise` [chunk, A] for one
        observation's state vector."""
        s = self.normalised(state)
        x = np.array(noise, np.float32).reshape(-1)
        if self.kind == "flow":
            for embedding, _ in self.plan:
                x += self._net(np.concatenate([s, x, embedding]))
        else:
            for embedding, (sqrt_ab, sqrt_1m_ab, sqrt_ab_next, sqrt_1m_ab_next) in self.plan:
                eps = self._net(np.concatenate([s, x, embedding]))
                clean = (x - sqrt_1m_ab * eps) / sqrt_ab
                if sqrt_ab_next is None:
                    x = clean
                    break
                _clip(clean, 1.0)
                x = sqrt_ab_next * clean + sqrt_1m_ab_next * eps
        _clip(x, 1.0)
        return x.reshape(self.shape)


def _clip(x: np.ndarray, bound: float) -> None:
    """x clipped to [-bound, bound] in place (np.clip's own overhead is twice this at these sizes)."""
    np.minimum(np.maximum(x, -bound, out=x), bound, out=x)
