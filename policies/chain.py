"""On-policy fine-tuning of a flow/diffusion policy: its sampler made a Markov chain of Gaussian steps, each with an
exact log-probability, so PPO can score and move the whole chain (`robo_rl/algos/ppo.py`).

  reinflow (a flow policy)       x_{k+1} = x_k + v_θ(x_k, t_k)/K + σ_φ(s, t_k)·ε,  k = 0..K-1, x_0 ~ N(0, I)
                                 σ_φ a small learnable noise network squashed into [σ_min, σ_max] per dimension
                                 (ReinFlow, Zhang et al. 2025); K = 1-4 steps; `sigma_max_first` widens the first
                                 step's range only: noise there changes which mode the chain lands in, noise at the
                                 last step only jitters the chunk (on Lift it cost success: BENCHMARKS.md);
                                 `initial_noise=learned` draws x_0 ~ N(μ_ψ(s), σ_ψ(s)²) instead (μ in [-1, 1], σ in
                                 [initial_sigma_min, 1], N(0, I) at the start) and scores it as one more term, so PPO
                                 also picks where the chain starts, as DSRL does, staying inside the prior's support
  dppo (a diffusion policy)      K DDIM steps; the first K − K′ deterministic, the last K′ stochastic:
                                 x_{k-1} = μ_DDIM(x_k, ε_θ(x_k, k)) + σ_k·ε with σ_k ≥ σ_min (DPPO, Ren et al. 2024);
                                 only those K′ steps are scored, so only they are fine-tuned by the gradient

log π(chunk | s): each scored step's exact Gaussian log-density log N(x_next; μ_θ(x), σ²), per element clamped to
[-5, 2] and averaged over the chunk's elements and the scored steps (a per-dimension figure: PPO's clip then means
the same whatever the chunk's size, as DPPO and ReinFlow use it), kept with the chunk's chain of x's
(`extra/chain`) and its log-probability when acting (`extra/log_prob`, `extra/decision`: 1 where a chunk opened),
so the learner recomputes it under new weights from the same chain. The chunk executed is the chain's end, clipped
to [-1, 1]. With `deterministic` (evaluation) the chain runs without noise.

The generator is our flow/diffusion policy (`robo-rl bc`), or, for ReinFlow, a LeRobot SmolVLA given as `path` (its
folder or hub id, with `task`): its flow action expert is fine-tuned, its VLM stays frozen (`policies/vla_flow.py`).
"""

from __future__ import annotations

import collections
import copy
import math

import numpy as np
import torch
from torch import nn

from policies.acting import ActingPolicy
from policies.base import copy_sharing, obs_rows
from policies.bc import BCCheckpointError, feature_mismatch, read_bc_checkpoint
from policies.flow import GENERATIVE_KIND, ChunkGenerator, build_generator
from policies.mlp import mlp
from policies.vla_flow import LeRobotFlowExpert, is_lerobot_folder_or_hub_id

METHODS = ("reinflow", "dppo")
INITIAL_NOISE = ("prior", "learned")
LOG_2PI = math.log(2 * math.pi)
INITIAL_STD_OFFSET = 0.01  # the learned x_0's std leaves 1 at the start, where |·| has no slope
LOG_PROB_MIN, LOG_PROB_MAX = -5.0, 2.0  # per element (DPPO clamps its log-probabilities to these)


class ChainPolicy(nn.Module, ActingPolicy):
    def __init__(
        self,
        observation_space,
        action_dim: int,
        path: str | None = None,
        method: str = "reinflow",
        steps: int | None = None,
        stochastic_steps: int | None = None,
        sigma_min: float = 0.05,
        sigma_max: float = 0.12,
        noise_hidden: list[int] = (64, 64),
        execute_steps: int | None = None,
        model: dict | None = None,
        generator: ChunkGenerator | None = None,
        task: str | None = None,
        camera_map: dict | None = None,
        sigma_max_first: float | None = None,
        initial_noise: str = "prior",
        initial_sigma_min: float = 0.3,
    ) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"policy.method must be reinflow or dppo, got '{method}'")
        if not 0 < sigma_min <= sigma_max <= 1.0:
            raise ValueError(
                f"policy.sigma_min/sigma_max must satisfy 0 < min <= max <= 1, got {sigma_min}, {sigma_max}"
            )
        if sigma_max_first is not None and not sigma_min <= sigma_max_first <= 1.0:
            raise ValueError(
                f"policy.sigma_max_first must be in [sigma_min, 1] = [{sigma_min}, 1], got {sigma_max_first}"
            )
        if initial_noise not in INITIAL_NOISE:
            raise ValueError(f"policy.initial_noise must be one of {INITIAL_NOISE}, got '{initial_noise}'")
        if initial_noise == "learned" and method != "reinflow":
            raise ValueError(
                "policy.initial_noise=learned is for policy.method=reinflow (DPPO's early steps are "
                "frozen and unscored)"
            )
        if not 0 < initial_sigma_min <= 1.0:
            raise ValueError(f"policy.initial_sigma_min must be in (0, 1], got {initial_sigma_min}")
        # `model`: the architecture `robo-rl train` behaviour-clones when no path is given (read there, not here)
        model = generator
        if model is None and path and method == "reinflow" and is_lerobot_folder_or_hub_id(path):
            from policies.lerobot_base import LeRobotBase  # a VLA: ReinFlow fine-tunes its flow action expert

            base = LeRobotBase.load(path, observation_space, action_dim, task=task, camera_map=camera_map)
            model = LeRobotFlowExpert(base)
            execute_steps = execute_steps or base.chunk_size
        if model is None:
            if not path:
                raise ValueError(
                    f"policy={method} fine-tunes a trained policy: set policy.path to a `robo-rl bc "
                    f"policy={'flow' if method == 'reinflow' else 'diffusion'}` checkpoint"
                )
            payload = read_bc_checkpoint(path)
            if payload["kind"] != GENERATIVE_KIND:
                raise BCCheckpointError(f"{payload['path']} is an MLP policy: {method} fine-tunes a flow/diffusion one")
            problem = feature_mismatch(payload["config"], observation_space, action_dim)
            if problem:
                raise BCCheckpointError(f"base checkpoint {payload['path']} does not fit this task: its {problem}")
            model = build_generator(payload)
            execute_steps = execute_steps or payload.get("execute_steps")
        wanted = "flow" if method == "reinflow" else "diffusion"
        if model.kind != wanted:
            raise ValueError(f"policy.method={method} fine-tunes a {wanted} policy; this checkpoint is a {model.kind}")
        self.model, self.method, self.action_dim = model, method, action_dim
        self.steps = int(steps or model.steps)
        if not 1 <= self.steps <= 100:
            raise ValueError(f"policy.steps must be in [1, 100], got {self.steps}")
        self.stochastic_steps = self.steps if method == "reinflow" else int(stochastic_steps or self.steps)
        if not 1 <= self.stochastic_steps <= self.steps:
            raise ValueError(f"policy.stochastic_steps={self.stochastic_steps} must be in [1, {self.steps}]")
        self.sigma_min, self.sigma_max = float(sigma_min), float(sigma_max)
        self.sigma_max_first = self.sigma_max if sigma_max_first is None else float(sigma_max_first)  # reinflow
        chunk = model.chunk_size
        if method == "reinflow":  # σ_φ(features, t) per dimension of the chunk
            self.noise_net = mlp(
                model.feature_dim + model.config["time_features"], list(noise_hidden), int(np.prod(model.noise_shape))
            )
        # `initial_noise=learned`: x_0 ~ N(μ_ψ(s), σ_ψ(s)²), μ in [-1, 1], σ in [initial_sigma_min, 1], starting at
        # the prior N(0, I) (the last layer zero: μ = 0, σ ≈ 1), scored as one more step of the chain
        self.initial_noise, self.initial_sigma_min = initial_noise, float(initial_sigma_min)
        if initial_noise == "learned":
            self.initial_net = mlp(model.feature_dim, list(noise_hidden), 2 * int(np.prod(model.noise_shape)))
            last = [m for m in self.initial_net.modules() if isinstance(m, nn.Linear)][-1]
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
        # DPPO fine-tunes the last K′ steps only: the first K − K′ run a frozen copy (never sent, rebuilt by each
        # process from the checkpoint); a list keeps it out of the state dict
        self.frozen = [copy.deepcopy(model).requires_grad_(False) if self.stochastic_steps < self.steps else None]
        self.execute_steps = min(execute_steps or chunk, chunk)
        self.chain_shape = (self.stochastic_steps + 1, *model.noise_shape)  # a VLA's: its padded action width
        # each env's running chunk, by its slot in the actor (one actor may step several envs: `actor.num_envs`)
        self.queues: dict[int, collections.deque] = {}
        self.extras_spec = {
            "chain": ((int(np.prod(self.chain_shape)),), np.float32),
            "log_prob": ((1,), np.float32),
            "decision": ((1,), np.float32),
        }

    vector_slots = True  # acts for several envs in one batched call, each env's chunk its own (`slots`)

    def __deepcopy__(self, memo):  # the episodes' chunks, whichever weights act
        return copy_sharing(self, memo, self.queues)

    def _apply(self, fn, recurse: bool = True):
        """`.to(device)` / `.half()` move the frozen copy too (a list hides it from the state dict, not from the
        device: the learner on a GPU runs its first K − K′ steps there)."""
        if self.frozen[0] is not None:
            self.frozen[0]._apply(fn, recurse)
        return super()._apply(fn, recurse)

    # --- the chain ------------------------------------------------------------------------------
    def _steps(self) -> list[tuple[float, int, int]]:
        """Per sampling step: (its time for the network, the DDIM timestep k, the next one; 0, 0 for a flow)."""
        if self.method == "reinflow":
            return [(t, 0, 0) for t in self.model.flow_times(self.steps)]
        ts = self.model.ddim_timesteps(self.steps)
        T = len(self.model.alpha_bar)
        return [(k / T, k, ts[i + 1] if i + 1 < len(ts) else 0) for i, k in enumerate(ts)]

    def features(self, obs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The fine-tuned network's observation features, and the frozen copy's where unscored steps need them."""
        frozen = None
        if self.stochastic_steps < self.steps:
            with torch.no_grad():
                frozen = self.frozen[0].features(obs)
        return self.model.features(obs), frozen

    def step_mean_std(self, features: tuple, x: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of sampling step i from x (std 0 where the step is deterministic)."""
        t, k, nxt = self._steps()[i]
        scored = i >= self.steps - self.stochastic_steps
        m = self.model if scored else self.frozen[0]  # DPPO: the unscored early steps keep the original network
        features = features[0] if scored else features[1]
        if self.method == "reinflow":
            mean = x + m.predict(features, x, t) / self.steps
            raw = self.noise_net(torch.cat([m.pooled(features), m.time_embedding(t, len(x))], dim=-1)).view_as(x)
            high = self.sigma_max_first if i == 0 else self.sigma_max
            return mean, self.sigma_min + (high - self.sigma_min) * torch.sigmoid(raw)
        ab = m.alpha_bar[k - 1]
        eps = m.predict(features, x, t)
        clean = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1.0, 1.0)
        if nxt == 0:  # the last step lands on the clean chunk
            mean = clean
        else:
            ab_next = m.alpha_bar[nxt - 1]
            mean = ab_next.sqrt() * clean + (1 - ab_next).sqrt() * eps
        return mean, torch.full_like(mean, self.sigma_min if scored else 0.0)

    @property
    def scored_terms(self) -> int:
        """The Gaussian terms log π averages: the stochastic steps, and x_0 where its distribution is learned."""
        return self.stochastic_steps + (self.initial_noise == "learned")

    def initial_mean_std(self, features: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """x_0's distribution: N(0, I), or the learned N(μ_ψ(s), σ_ψ(s)²)."""
        pooled = self.model.pooled(features[0])
        shape = (len(pooled), *self.model.noise_shape)
        if self.initial_noise != "learned":
            zero = torch.zeros(shape, device=pooled.device)
            return zero, torch.ones_like(zero)
        raw_mean, raw_std = self.initial_net(pooled).view(len(pooled), 2, -1).unbind(1)
        # σ = σ_min + (1 − σ_min)·exp(−|raw + 0.01|): 0.99 + 0.01·σ_min at the zero start, and the slope there is
        # (1 − σ_min)·0.99 either way raw moves (a sigmoid saturated at the prior's σ = 1 had a slope of 0.005: in
        # 50k env steps of Lift the head narrowed x_0 from 0.993 to 0.98, where the prior's mode x_0 = 0 succeeds far
        # more often than its samples, BENCHMARKS.md)
        low = self.initial_sigma_min
        std = low + (1.0 - low) * torch.exp(-(raw_std + INITIAL_STD_OFFSET).abs())
        return torch.tanh(raw_mean).view(shape), std.view(shape)

    def sample_chain(
        self,
        obs: dict,
        deterministic: bool = False,
        features: tuple | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(chain [B, K′+1, chunk, A], log-prob [B]) from fresh noise (drawn from x_0's distribution even when
        `deterministic`: that only takes the steps' noise away). `features`: `self.features(obs)` where the caller
        has them (several chains for the same observations)."""
        features = self.features(obs) if features is None else features
        b, device = len(features[0]), self.model.pooled(features[0]).device
        mean0, std0 = self.initial_mean_std(features)
        x = mean0 + std0 * torch.randn(b, *self.model.noise_shape, device=device)
        first = self.steps - self.stochastic_steps
        chain, log_prob = [], torch.zeros(b, device=device)
        if self.initial_noise == "learned":
            log_prob = step_log_prob(x, mean0, std0) / self.scored_terms
        for i in range(self.steps):
            if i >= first:  # the scored part of the chain: every x from its start to the chunk
                chain.append(x)
            mean, std = self.step_mean_std(features, x, i)
            if deterministic or i < first:
                x = mean
            else:
                x = mean + std * torch.randn_like(mean)
                log_prob = log_prob + step_log_prob(x, mean, std) / self.scored_terms
        chain.append(x)
        return torch.stack(chain, dim=1), log_prob

    def chain_log_prob(
        self,
        obs: dict,
        chain: torch.Tensor,
        features: tuple | None = None,
        split: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """log π of each recorded chain [B, K′+1, chunk, A] under the current weights, and the mean per-step
        Gaussian entropy (for an entropy bonus). `features`: `self.features(obs)` where the caller has them.
        `split` (a learned x_0): x_0's term and the steps' mean term too, for a separate trust region each; log π is
        (x_0's + K′·the steps') / (K′ + 1)."""
        features = self.features(obs) if features is None else features
        first = self.steps - self.stochastic_steps
        steps = torch.zeros(len(chain), device=chain.device)
        initial, entropy = None, []
        if self.initial_noise == "learned":
            mean, std = self.initial_mean_std(features)
            initial = step_log_prob(chain[:, 0], mean, std)
            entropy.append((0.5 * (1 + LOG_2PI) + std.log()).flatten(1).mean(-1))
        elif split:
            raise ValueError("a split log-probability needs policy.initial_noise=learned")
        for j in range(self.stochastic_steps):
            mean, std = self.step_mean_std(features, chain[:, j], first + j)
            steps = steps + step_log_prob(chain[:, j + 1], mean, std)
            entropy.append((0.5 * (1 + LOG_2PI) + std.log()).flatten(1).mean(-1))
        entropy = torch.stack(entropy).mean(0)
        log_prob = (steps if initial is None else steps + initial) / self.scored_terms
        return (log_prob, entropy, initial, steps / self.stochastic_steps) if split else (log_prob, entropy)

    # --- acting ---------------------------------------------------------------------------------
    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        if mode != "sync":
            raise ValueError(
                f"actor.chunking={mode}: ReinFlow and DPPO learn on-policy from each chunk's log-probability at the "
                "observation it acts on; a chunk that takes over steps later is off that policy: use "
                "actor.chunking=sync"
            )

    def reset(self, slot: int | None = None) -> None:
        """A new episode in env `slot` (every env's when None): its chunk is dropped."""
        if slot is None:
            self.queues.clear()
        else:
            self.queues.pop(slot, None)

    @torch.no_grad()
    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:
        """The next action of each env's chunk, for a batch of observations (row j is env `slots[j]`'s; one env,
        slot 0, by default). The envs whose chunk is used up get new chains from one batched sampling call."""
        slots = [0] if slots is None else list(slots)
        if len(slots) != len(obs["state"]) or len(set(slots)) != len(slots):
            raise ValueError(f"slots {slots} must name each of the {len(obs['state'])} observations' env once")
        queues = [self.queues.setdefault(s, collections.deque()) for s in slots]
        need = [j for j, q in enumerate(queues) if not q]
        if need:
            rows = torch.as_tensor(need)
            chain, log_prob = self.sample_chain(obs_rows(obs, rows), deterministic)
            for r, j in enumerate(need):
                flat = chain[r].flatten()
                chunk = self.model.to_actions(chain[r, -1])[: self.execute_steps]
                queues[j].extend((a, flat, log_prob[r]) for a in chunk)
        action, chain, log_prob = zip(*(q.popleft() for q in queues), strict=True)
        decision = torch.zeros(len(slots), 1)
        decision[need] = 1.0
        return torch.stack(action), {
            "chain": torch.stack(chain),
            "log_prob": torch.stack(log_prob).view(-1, 1),
            "decision": decision,
        }

    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False, slots: list[int] | None = None) -> torch.Tensor:
        return self.act_with_extras(obs, deterministic, slots)[0]


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Element-wise log N(x; mean, std²)."""
    return -0.5 * ((x - mean) / std) ** 2 - std.log() - 0.5 * LOG_2PI


def step_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """One step's log-probability as PPO uses it: each element's exact Gaussian log-density clamped to
    [LOG_PROB_MIN, LOG_PROB_MAX] (DPPO's bounds), averaged over the chunk's elements, so that a PPO ratio of
    1 ± clip means a per-dimension change whatever the chunk's size."""
    return gaussian_log_prob(x, mean, std).clamp(LOG_PROB_MIN, LOG_PROB_MAX).flatten(1).mean(-1)
