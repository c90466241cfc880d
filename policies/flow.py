"""Flow-matching and diffusion policies: a chunk of actions generated from noise, conditioned on the observation.

Both are one network `net(features(obs), x, t)` over a chunk x of shape [chunk, A] in the task's [-1, 1] actions:

  flow (rectified flow):  x_t = (1 − t)·w + t·a, trained to predict the velocity a − w; sampled by K Euler steps
                          from the noise w at t = 0 to the action at t = 1.
  diffusion (DDPM/DDIM):  trained to predict the noise ε of x_k = √ᾱ_k·a + √(1 − ᾱ_k)·ε over T timesteps (cosine
                          schedule); sampled by K deterministic DDIM steps (η = 0) from w = x_T, the predicted clean
                          chunk clipped to [-1, 1] at every step.

With K fixed, sampling is a deterministic map a = π(s, w) of the initial noise w ~ N(0, I) [chunk, A]: what DSRL
steers (`policies/dsrl.py`) and what one-step distillation (`robo_rl/offline/distill.py`) copies. `invert` runs the map
backwards (the noise a chunk of actions came from), for demonstrations a noise-space learner must label.

A checkpoint (`<run>/bc/policy.pt`, written by `robo-rl bc policy=flow|diffusion`) holds only tensors and plain
containers, like the MLP's (`policies/bc.py`), with `kind: generative_policy`.
One idea in one file (about 450 lines): the chunk generator, its sampler and inversion, and the policy built on it.

One idea past ~400 lines: the chunk generator and the policy that samples it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from policies.acting import ActingPolicy
from policies.advantage import DROPPED, AdvantageEmbedding, guided
from policies.base import copy_sharing
from policies.checkpoint import (
    GENERATIVE_FORMAT,
    GENERATIVE_KIND,
    BCCheckpointError,
    feature_mismatch,
    read_bc_checkpoint,
)
from policies.chunking import CHUNK_EXTRA, ChunkExecutor, blend, guided_flow_sample
from policies.cpu_sampler import CpuSampler
from policies.encoders import EncoderConfig, ObservationEncoder
from policies.language import instruction_rows
from policies.mlp import mlp
from policies.state_norm import NORMALISED_CLIP, set_normalisation
from policies.task_embedding import TaskEmbedding

KINDS = ("flow", "diffusion")
MAX_STEPS = 1000
COSINE_OFFSET = 0.008  # the cosine schedule's s (Nichol & Dhariwal)


class ChunkGenerator(nn.Module):
    """The network and its sampler; `config` rebuilds it (plain containers). With `task_embedding` > 0 the features
    end with a learned vector of the observation's instruction, one per entry of `tasks` (task_embedding.py)."""

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        chunk_size: int = 8,
        kind: str = "flow",
        steps: int = 8,
        hidden: list[int] = (256, 256, 256),
        cameras: dict[str, list[int]] | None = None,
        encoder: dict | None = None,
        state_names: list[str] | None = None,
        time_features: int = 32,
        diffusion_timesteps: int = 100,
        task_embedding: int = 0,
        tasks: list[str] | None = None,
        advantage_embedding: int = 0,
        guidance: float = 1.0,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"a generative policy's kind must be flow or diffusion, got '{kind}'")
        check_steps(steps, kind, diffusion_timesteps)
        if chunk_size < 1 or action_dim < 1 or state_dim < 1 or time_features < 2:
            raise ValueError(
                f"a generative policy needs positive sizes: state_dim={state_dim}, action_dim="
                f"{action_dim}, chunk_size={chunk_size}, time_features={time_features}"
            )
        cameras = {name: [int(h), int(w)] for name, (h, w) in (cameras or {}).items()}
        self.config = {
            "state_dim": int(state_dim),
            "action_dim": int(action_dim),
            "chunk_size": int(chunk_size),
            "kind": kind,
            "steps": int(steps),
            "hidden": [int(h) for h in hidden],
            "cameras": cameras,
            "encoder": dict(encoder) if cameras and encoder else None,
            "state_names": list(state_names or []),
            "time_features": int(time_features),
            "diffusion_timesteps": int(diffusion_timesteps),
        }
        if task_embedding:  # only a task-conditioned model's config names them: the others' stay as they were
            self.config.update(task_embedding=int(task_embedding), tasks=list(tasks or []))
        if advantage_embedding:  # RECAP's label input (policies/advantage.py); sampled with guidance at this scale
            self.config.update(advantage_embedding=int(advantage_embedding), guidance=float(guidance))
        self.state_dim, self.action_dim, self.chunk_size = state_dim, action_dim, chunk_size
        self.kind, self.steps = kind, int(steps)
        self.encoder = ObservationEncoder(
            state_dim, {n: tuple(s) for n, s in cameras.items()}, config=EncoderConfig.parse(self.config["encoder"])
        )
        width = chunk_size * action_dim
        self.task_embedding = TaskEmbedding(tasks or [], task_embedding) if task_embedding else None
        self.advantage = AdvantageEmbedding(advantage_embedding) if advantage_embedding else None
        self.guidance = float(guidance)
        self.net = mlp(self.feature_dim + width + time_features, list(hidden), width, layer_norm=True)
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        freqs = torch.exp(torch.linspace(0.0, math.log(1000.0), time_features // 2))
        self.register_buffer("time_freqs", freqs, persistent=False)
        if kind == "diffusion":
            k = torch.arange(diffusion_timesteps + 1, dtype=torch.float64) / diffusion_timesteps
            f = torch.cos((k + COSINE_OFFSET) / (1 + COSINE_OFFSET) * math.pi / 2) ** 2
            alpha_bar = (f[1:] / f[0]).clamp(1e-5, 1.0)  # ᾱ_k for k = 1..T (index k - 1)
            self.register_buffer("alpha_bar", alpha_bar.float(), persistent=False)

    @property
    def noise_shape(self) -> tuple[int, int]:
        return self.chunk_size, self.action_dim

    set_normalisation = set_normalisation  # per-dimension mean and std of the training states

    @property
    def feature_dim(self) -> int:
        extra = [e.width for e in (self.task_embedding, self.advantage) if e is not None]
        return self.encoder.out_dim + sum(extra)

    @staticmethod
    def pooled(features: torch.Tensor) -> torch.Tensor:
        """The features as one vector per observation (ReinFlow's noise network and PPO's value take it)."""
        return features

    @staticmethod
    def to_actions(x: torch.Tensor) -> torch.Tensor:
        """A sampled chunk → the actions the env executes."""
        return x.clamp(-1.0, 1.0)

    # --- the network ------------------------------------------------------------------------------
    def features(self, obs: dict) -> torch.Tensor:
        state = ((obs["state"] - self.state_mean) / self.state_std).clamp(-NORMALISED_CLIP, NORMALISED_CLIP)
        images = {name: obs["images"][name] for name in self.config["cameras"]}
        features = self.encoder({"state": state, "images": images})
        if self.task_embedding is not None:  # the row's instruction
            features = torch.cat([features, self.task_embedding(obs, len(features))], dim=-1)
        if self.advantage is not None:  # the row's advantage label, last (guidance swaps it)
            features = torch.cat([features, self.advantage(obs, len(features), features.device)], dim=-1)
        return features

    def time_embedding(self, t: torch.Tensor | float, batch: int) -> torch.Tensor:
        """[B, time_features] sinusoids of t ∈ [0, 1] (a tensor [B], or one float for the whole batch: sampling
        visits the same few times over and over, so their embeddings are computed once and kept)."""
        if isinstance(t, torch.Tensor):
            angles = t.float()[:, None] * self.time_freqs[None]
            return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
        key = (float(t), self.time_freqs.device, torch.is_inference_mode_enabled())
        cache = self.__dict__.setdefault("_time_cache", {})
        if key not in cache:
            angles = float(t) * self.time_freqs[None]
            cache[key] = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
        return cache[key].expand(batch, -1)

    def predict(self, features: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """The velocity (flow) or the noise (diffusion) at chunk x [B, chunk, A] and time t ∈ [0, 1] ([B] or one
        float for all)."""
        net_in = torch.cat([features, x.flatten(1), self.time_embedding(t, len(x))], dim=-1)
        if torch.is_grad_enabled() or torch.is_autocast_enabled(x.device.type):
            return self.net(net_in).view_as(x)
        return self._inference_net(net_in).view_as(x)

    def _inference_net(self, h: torch.Tensor) -> torch.Tensor:
        """`net` without module calls (the same arithmetic): at batch 1 the actor's time goes mostly into per-call
        overhead, a third of it into nn.Module.__call__."""
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                h = F.linear(h, layer.weight, layer.bias)
            elif isinstance(layer, nn.LayerNorm):
                h = F.layer_norm(h, layer.normalized_shape, layer.weight, layer.bias, layer.eps)
            elif isinstance(layer, nn.ReLU):
                h = F.relu(h)
            else:
                h = layer(h)
        return h

    def forward(self, obs: dict) -> torch.Tensor:
        """The chunk from zero noise (the distribution's centre path): [B, chunk, A]."""
        features = self.features(obs)
        return self.sample(features, features.new_zeros(len(features), *self.noise_shape))

    # --- training ---------------------------------------------------------------------------------
    def loss(
        self, obs: dict, actions: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The flow-matching or denoising loss over the real actions of each chunk (padding masked out)."""
        features = self.features(obs)
        b = len(actions)
        noise = torch.randn(actions.shape, generator=generator, device=actions.device)
        if self.kind == "flow":
            t = torch.rand(b, generator=generator, device=actions.device)
            x = (1 - t)[:, None, None] * noise + t[:, None, None] * actions
            target, time = actions - noise, t
        else:
            T = len(self.alpha_bar)
            k = torch.randint(0, T, (b,), generator=generator, device=actions.device)
            ab = self.alpha_bar[k][:, None, None]
            x = ab.sqrt() * actions + (1 - ab).sqrt() * noise
            target, time = noise, (k + 1).float() / T
        error = (self.predict(features, x, time) - target).pow(2).mean(-1)
        return (error * mask).sum() / mask.sum().clamp_min(1.0)

    # --- sampling ---------------------------------------------------------------------------------
    def guided_predict(self, features: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """`predict` with classifier-free guidance at `self.guidance` for an advantage-conditioned model (the
        features' label against "dropped"); `predict` itself for any other."""
        if self.advantage is None or self.guidance == 1.0:
            return self.predict(features, x, t)
        unconditional = self.predict(self.advantage.swap_to(features, DROPPED), x, t)
        return guided(self.predict(features, x, t) if self.guidance else unconditional, unconditional, self.guidance)

    def flow_times(self, steps: int) -> list[float]:
        return [k / steps for k in range(steps)]

    def ddim_timesteps(self, steps: int) -> list[int]:
        """DDIM's timesteps k (1..T), from T down, evenly spaced."""
        T = len(self.alpha_bar)
        return sorted({max(1, round(T * (i + 1) / steps)) for i in range(steps)}, reverse=True)

    def sample(self, features: torch.Tensor, noise: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        """a = π(s, w): the chunk [B, chunk, A] in [-1, 1] that `steps` (default K) deterministic steps make of
        the initial noise w [B, chunk, A]."""
        steps = steps or self.steps
        x = noise
        if self.kind == "flow":
            for t in self.flow_times(steps):
                x = x + self.guided_predict(features, x, t) / steps
            return x.clamp(-1.0, 1.0)
        timesteps = self.ddim_timesteps(steps)
        T = len(self.alpha_bar)
        for i, k in enumerate(timesteps):
            ab = self.alpha_bar[k - 1]
            eps = self.guided_predict(features, x, k / T)
            clean = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1.0, 1.0)
            if i + 1 == len(timesteps):
                return clean
            ab_next = self.alpha_bar[timesteps[i + 1] - 1]
            x = ab_next.sqrt() * clean + (1 - ab_next).sqrt() * eps
        return x  # not reached: timesteps is never empty

    def invert(
        self,
        features: torch.Tensor,
        actions: torch.Tensor,
        steps: int | None = None,
        iterations: int = 6,
        refine: int = 60,
        bound: float | None = None,
    ) -> torch.Tensor:
        """The initial noise whose sample is `actions` [B, chunk, A]: each sampling step undone in reverse order, its
        implicit equation solved by fixed-point iteration (exact for the discrete sampler where nothing was clipped
        to [-1, 1]), then `refine` gradient steps on ‖sample(w) − actions‖² through the sampler, w kept in
        [-bound, bound] if given (the map is many-to-one where a clip or the network merges noises: any noise
        that makes the same chunk will do)."""
        features = features.detach()
        with torch.no_grad():
            noise = self._undo_steps(features, actions, steps or self.steps, iterations)
        if bound is not None:
            noise = noise.clamp(-bound, bound)
        if refine:
            noise = self._refine(features, actions, noise, steps or self.steps, refine, bound)
        return noise

    def _refine(self, features, actions, noise, steps: int, iterations: int, bound: float | None) -> torch.Tensor:
        w = noise.clone().requires_grad_(True)
        optim = torch.optim.Adam([w], lr=0.05)
        best, best_error = noise.clone(), torch.full((len(noise),), float("inf"), device=noise.device)
        with torch.enable_grad():
            for _ in range(iterations + 1):
                error = (self.sample(features, w, steps) - actions).pow(2).flatten(1).mean(1)
                better = error.detach() < best_error
                best[better], best_error[better] = w.detach()[better], error.detach()[better]
                optim.zero_grad()
                error.sum().backward()
                optim.step()
                if bound is not None:
                    with torch.no_grad():
                        w.clamp_(-bound, bound)
        return best

    def _undo_steps(self, features, actions, steps: int, iterations: int) -> torch.Tensor:
        if self.kind == "flow":  # x_{k+1} = x_k + v(x_k, t_k)/K  →  x_k = x_{k+1} − v(x_k, t_k)/K
            y = actions
            for t in reversed(self.flow_times(steps)):
                time, x = t, y
                for _ in range(iterations):
                    x = y - self.predict(features, x, time) / steps
                y = x
            return y
        timesteps = self.ddim_timesteps(steps)
        T = len(self.alpha_bar)
        ab = [self.alpha_bar[k - 1] for k in timesteps]
        # the last step returned clean = (x − √(1 − ᾱ)·ε(x)) / √ᾱ  →  x = √ᾱ·a + √(1 − ᾱ)·ε(x)
        time = timesteps[-1] / T
        x = actions
        for _ in range(iterations):
            x = ab[-1].sqrt() * actions + (1 - ab[-1]).sqrt() * self.predict(features, x, time)
        for i in range(len(timesteps) - 2, -1, -1):  # x' = √ᾱ'·(x − √(1 − ᾱ)·ε)/√ᾱ + √(1 − ᾱ')·ε, ε = ε(x, k_i)
            time, after = timesteps[i] / T, x
            for _ in range(iterations):
                eps = self.predict(features, x, time)
                x = ab[i].sqrt() * (after - (1 - ab[i + 1]).sqrt() * eps) / ab[i + 1].sqrt() + (1 - ab[i]).sqrt() * eps
        return x

    def checkpoint(self, **extra) -> dict:
        weights = {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}
        return {
            "format": GENERATIVE_FORMAT,
            "kind": GENERATIVE_KIND,
            "config": self.config,
            "weights": weights,
            **extra,
        }


def check_steps(steps: int, kind: str, diffusion_timesteps: int = 100) -> None:
    """A step count the sampler can run, or a one-line ValueError."""
    limit = diffusion_timesteps if kind == "diffusion" else MAX_STEPS
    if not isinstance(steps, int | np.integer) or not 1 <= steps <= limit:
        raise ValueError(f"a {kind} policy's steps must be an integer in [1, {limit}], got {steps}")


class GenerativeBase:
    """A loaded ChunkGenerator as a frozen base (`policies.base.BasePolicy`) that also takes its initial noise."""

    def __init__(
        self,
        model: ChunkGenerator,
        device: str | torch.device = "cpu",
        execute_steps: int | None = None,
        action_range: tuple[list[float], list[float]] | None = None,
        seed: int = 0,
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.action_dim, self.chunk_size = model.action_dim, model.chunk_size
        self.noise_shape = model.noise_shape
        self.execute_steps, self.action_range = execute_steps, action_range
        self.cameras = list(model.config["cameras"])
        self.rng = np.random.default_rng(seed)  # the initial noises it draws itself
        self.fast = self.cpu_sampler()

    def cpu_sampler(self):
        """numpy's sampler for one observation (`policies/cpu_sampler.py`) where it covers this model, else None."""
        if self.model.task_embedding is not None or self.model.advantage is not None:  # nor an instruction, nor a label
            return None
        return CpuSampler.build(self.model)

    def reset(self) -> None:
        pass  # no observation history

    def reseed(self, seed: int) -> None:
        """Draw the initial noises from `seed` on: an evaluation reseeds per episode, so the same file on the same
        episode seeds gives the same result whatever the base drew before (a distill teacher's own rollouts)."""
        self.rng = np.random.default_rng(seed)

    def obs_tensors(self, obs: dict) -> dict:
        state = torch.as_tensor(np.asarray(obs["state"], np.float32), device=self.device).unsqueeze(0)
        images = {
            n: torch.as_tensor(np.asarray(obs["images"][n]), device=self.device).unsqueeze(0) for n in self.cameras
        }
        return {"state": state, "images": images, **instruction_rows([obs])}

    def chunks(self, obs: dict, z: torch.Tensor) -> torch.Tensor:
        """The chunks [B, chunk, A] this policy makes of a batch of observations (tensors) and noises."""
        return self.model.sample(self.model.features(obs), z)

    def predict_chunk(self, obs: dict, noise: np.ndarray | None = None, guide=None) -> np.ndarray:
        """float32 [chunk, A]; from `noise` [chunk, A] when given, else from a fresh N(0, I) draw. On the CPU, for a
        state-only model, by numpy's sampler (the same arithmetic, a third of torch's time at batch 1). `guide`
        (real-time chunking's committed actions, policies/chunking.py): a flow model is steered towards them while
        it samples, a diffusion model's chunk blended with them."""
        if noise is None:
            noise = self.rng.standard_normal(self.noise_shape, dtype=np.float32)
        else:
            noise = check_noise(noise, self.noise_shape)
        if guide is not None:
            if self.model.kind != "flow":
                return blend(self.predict_chunk(obs, noise), guide)
            with torch.no_grad():
                features = self.model.features(self.obs_tensors(obs))
            z = torch.as_tensor(noise, device=self.device)[None]
            return guided_flow_sample(self.model, features, z, guide)[0].cpu().numpy().astype(np.float32)
        if self.fast is not None:
            if not self.fast.current(self.model):  # weights or step count changed since it was built
                self.fast = self.cpu_sampler()
            return self.fast.sample(obs["state"], noise)
        return self._torch_chunk(obs, noise)

    @torch.inference_mode()
    def _torch_chunk(self, obs: dict, noise: np.ndarray) -> np.ndarray:
        z = torch.as_tensor(noise, device=self.device)[None]
        return self.chunks(self.obs_tensors(obs), z)[0].cpu().numpy().astype(np.float32)


def check_noise(noise, shape: tuple[int, ...]) -> np.ndarray:
    """float32 noise of exactly `shape`, finite, or a one-line ValueError."""
    noise = np.asarray(noise, np.float32)
    if noise.shape != tuple(shape):
        raise ValueError(f"the initial noise has shape {noise.shape}, the policy takes {tuple(shape)}")
    if not np.all(np.isfinite(noise)):
        raise ValueError("the initial noise is not finite")
    return noise


def build_generator(payload: dict) -> ChunkGenerator:
    """The ChunkGenerator of a checkpoint payload, its weights loaded (one-line error if they do not fit)."""
    try:
        model = ChunkGenerator(**payload["config"])
        model.load_state_dict(payload["weights"])
    except (KeyError, RuntimeError, TypeError, ValueError) as e:
        raise BCCheckpointError(
            f"generative checkpoint {payload.get('path')} does not rebuild ({str(e).splitlines()[0][:160]})"
        ) from None
    return model


def load_generative_base(
    payload: dict,
    observation_space,
    action_dim: int,
    state_names=None,
    device: str | torch.device = "cpu",
    task: str | None = None,
) -> GenerativeBase:
    """`task`: the instruction of an observation that carries none, for a task-conditioned model (others ignore it)."""
    problem = feature_mismatch(payload["config"], observation_space, action_dim, state_names)
    if problem:
        raise BCCheckpointError(f"base checkpoint {payload['path']} does not fit this task: its {problem}")
    model, rng = build_generator(payload), payload.get("action_range")
    if model.task_embedding is not None:
        model.task_embedding.set_default(task)
    return GenerativeBase(model, device, payload.get("execute_steps"), (rng["low"], rng["high"]) if rng else None)


class GenerativePolicy(nn.Module, ActingPolicy):
    """`policy=flow | diffusion` as the acting policy: a generative checkpoint run in chunks, each sampled from
    fresh noise (what `robo-rl eval` and `robo-rl bc` evaluate). Its architecture keys are what `robo-rl bc
    policy=flow` trains; `path` is the trained checkpoint."""

    def __init__(
        self,
        observation_space,
        action_dim: int,
        path: str | None,  # no defaults: built from `policy=flow|diffusion`, whose typed config holds them
        kind: str,
        chunk_size: int,
        execute_steps: int | None,
        steps: int,
        hidden: list[int],
        time_features: int,
        diffusion_timesteps: int,
        encoder: dict | None = None,
        task_embedding: int = 0,  # what `robo-rl bc` trains from the demonstrations' instructions; a path keeps its own
    ) -> None:
        super().__init__()
        if path:
            payload = read_bc_checkpoint(path)
            if payload["kind"] != GENERATIVE_KIND:
                raise BCCheckpointError(f"{payload['path']} is an MLP policy, not a flow or diffusion policy")
            base = load_generative_base(payload, observation_space, action_dim)
            self.model = base.model.requires_grad_(True)
            execute_steps = execute_steps or base.execute_steps
        else:
            cams = {n: list(s.shape[:2]) for n, s in observation_space["images"].spaces.items()}
            self.model = ChunkGenerator(
                observation_space["state"].shape[0],
                action_dim,
                chunk_size,
                kind,
                steps,
                list(hidden),
                cams,
                encoder,
                None,
                time_features,
                diffusion_timesteps,
            )
        self.action_dim = action_dim
        self.execute_steps = min(execute_steps or self.model.chunk_size, self.model.chunk_size)
        self.executor = ChunkExecutor(self.execute_steps)  # sync unless `use_chunking` says otherwise

    @property
    def queue(self):
        return self.executor.queue

    def __deepcopy__(self, memo):  # the episode's chunks are one, whichever weights act
        return copy_sharing(self, memo, self.executor)

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        self.executor.configure(mode, delay_steps, period_s)

    def chunk_stats(self) -> dict:
        return self.executor.stats()

    def reset(self, slot: int | None = None) -> None:
        self.executor.reset()

    extras_spec = CHUNK_EXTRA

    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:
        action = self.act(obs, deterministic)
        return action, {"chunk": torch.from_numpy(self.executor.record())}

    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        """The next action of the current chunk (a batch of one); a new chunk when it is due."""

        @torch.no_grad()  # on the executor's worker thread too, where the caller's grad mode does not reach
        def produce(row: dict, guide) -> np.ndarray:
            features = self.model.features(row)
            noise = torch.zeros if deterministic else torch.randn
            z = noise(len(features), *self.model.noise_shape)
            if guide is not None and self.model.kind == "flow":
                return guided_flow_sample(self.model, features, z, guide)[0].numpy()
            chunk = self.model.sample(features, z)[0].numpy()
            return chunk if guide is None else blend(chunk, guide)

        return torch.from_numpy(np.asarray(self.executor.step(obs, produce), np.float32))[None]
