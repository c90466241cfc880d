"""A LeRobot VLA's flow-matching action expert as the generator of a ReinFlow chain (`policies/chain.py`): ReinFlow
fine-tunes only the action expert; the vision-language model stays frozen and is never sent to actors.

SmolVLA (lerobot 0.6) runs its VLM once per decision over the images, the instruction and the state, keeps the
keys and values of that prefix, and integrates its action expert's velocity from noise (time 1) to the chunk
(time 0) in Euler steps of −1/K, attending to the kept prefix. Here:

  features(obs)       the prefix, computed without gradients: its key/value cache and pad mask, and its hidden
                      states mean-pooled over the valid tokens ([B, VLM width]: the input of ReinFlow's noise
                      network and of PPO's value network)
  predict(f, x, t)    the expert's velocity at our flow time t ∈ [0, 1) (0 = noise), i.e. SmolVLA's at 1 − t with
                      the sign turned, so that ChainPolicy's step x + v/K is SmolVLA's own Euler step
  to_actions(x)       the chunk's first `action_dim` columns (the rest is padding), un-normalised by the policy's
                      post-processor, clipped to [-1, 1]: what the env executes

The chain and the noise live in the VLA's normalised, padded action space, (chunk_size, max_action_dim). Trained:
the action expert (`lm_expert`), the action in/out projections and the action-time MLP; frozen: the VLM and the
state projection (both enter the prefix). π0/π0.5 keep their expert inside a PaliGemma stack with another
interface: refused in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from policies.flow import ChunkGenerator

SUPPORTED = ("smolvla",)
EXPERT_PARTS = (
    "vlm_with_expert.lm_expert",
    "action_in_proj",
    "action_out_proj",
    "action_time_mlp_in",
    "action_time_mlp_out",
)
FROZEN_PARTS = ("vlm_with_expert.vlm", "state_proj")


@dataclass
class Prefix:
    """The VLA's prefix for a batch of observations: what every denoising step attends to."""

    pooled: torch.Tensor  # [B, width] mean of the prefix's hidden states over its valid tokens
    pad_masks: torch.Tensor
    cache: object  # transformers' DynamicCache of the prefix's keys and values

    def __len__(self) -> int:
        return len(self.pooled)


class LeRobotFlowExpert(nn.Module):
    """ChainPolicy's generator over a LeRobot flow VLA (`policies.lerobot_base.LeRobotBase` of a SmolVLA)."""

    kind = "flow"

    def __init__(self, base, time_features: int = 32) -> None:
        super().__init__()
        cfg = base.policy.config
        if cfg.type not in SUPPORTED:
            raise ValueError(
                f"ReinFlow fine-tunes the flow action expert of a SmolVLA; base '{base.name}' is a "
                f"{cfg.type} policy, whose expert its chain cannot step (pi0 and pi05 keep theirs inside a "
                f"PaliGemma stack with another prefix and denoising-step interface); DSRL steers the noise of "
                f"smolvla, pi0, pi05 and diffusion policies: policy=dsrl"
            )
        if base.closed_loop or getattr(cfg, "adapt_to_pi_aloha", False):
            raise ValueError(
                f"base '{base.name}' runs closed-loop or with the Aloha adaptation: ReinFlow needs its open-loop chunks"
            )
        self.base = base  # its processors and names; its policy is this module's `vla`
        self.vla = base.policy
        model = self.vla.model
        model.requires_grad_(False)
        for part in EXPERT_PARTS:
            model.get_submodule(part).requires_grad_(True)
        for part in FROZEN_PARTS:  # rebuilt by each process from the checkpoint folder, never sent
            model.get_submodule(part).is_frozen_backbone = True
        self.action_dim, self.chunk_size, self.steps = base.action_dim, int(cfg.chunk_size), int(cfg.num_steps)
        self.noise_shape = (int(cfg.chunk_size), int(cfg.max_action_dim))
        self.feature_dim = int(model.vlm_with_expert.config.text_config.hidden_size)
        self.config = {"time_features": int(time_features)}
        freqs = torch.exp(torch.linspace(0.0, math.log(1000.0), time_features // 2))
        self.register_buffer("time_freqs", freqs, persistent=False)

    def train(self, mode: bool = True):  # the VLA keeps eval mode (no dropout): acting and scoring must agree
        super().train(mode)
        self.vla.eval()
        return self

    # --- the prefix -------------------------------------------------------------------------------
    def _batch(self, obs: dict) -> dict:
        """Our batch of observations (tensors) through the VLA's preprocessor, on this module's device."""
        device = self.time_freqs.device
        batch = self.base.preprocessor(self.base.batch_of(obs))
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    @torch.no_grad()
    def features(self, obs: dict) -> Prefix:
        from lerobot.policies.smolvla.modeling_smolvla import (
            OBS_LANGUAGE_ATTENTION_MASK,
            OBS_LANGUAGE_TOKENS,
            make_att_2d_masks,
        )

        batch = self._batch(obs)
        images, image_masks = self.vla.prepare_images(batch)
        state = self.vla.prepare_state(batch)
        model = self.vla.model
        embs, pad, att = model.embed_prefix(
            images, image_masks, batch[OBS_LANGUAGE_TOKENS], batch[OBS_LANGUAGE_ATTENTION_MASK], state=state
        )
        (out, _), cache = model.vlm_with_expert.forward(
            attention_mask=make_att_2d_masks(pad, att),
            position_ids=torch.cumsum(pad, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embs, None],
            use_cache=True,
        )
        valid = pad[..., None].to(out.dtype)
        pooled = ((out * valid).sum(1) / valid.sum(1).clamp_min(1.0)).float()
        return Prefix(pooled, pad, cache)

    @staticmethod
    def pooled(features: Prefix) -> torch.Tensor:
        return features.pooled

    # --- the velocity -----------------------------------------------------------------------------
    flow_times = ChunkGenerator.flow_times  # the same flow times and sinusoids (of `time_freqs`) as our flows
    time_embedding = ChunkGenerator.time_embedding

    def predict(self, features: Prefix, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """dx/dt at our time t (0 = noise): SmolVLA's velocity at its time 1 − t, sign turned."""
        tau = (1.0 - t).float() if torch.is_tensor(t) else torch.full((len(x),), 1.0 - float(t), device=x.device)
        v = self.vla.model.denoise_step(
            prefix_pad_masks=features.pad_masks, past_key_values=features.cache, x_t=x, timestep=tau
        )
        return -v.to(x.dtype)

    @torch.no_grad()
    def to_actions(self, x: torch.Tensor) -> torch.Tensor:
        """A chunk [chunk, max_action_dim] of the chain's end → the env's actions [chunk, action_dim] in [-1, 1]."""
        actions = self.base.postprocessor(x[None, :, : self.action_dim])
        return actions[0].to("cpu", torch.float32).clamp(-1.0, 1.0)


def is_lerobot_folder_or_hub_id(path: str) -> bool:
    """Whether `path` names a LeRobot pretrained_model folder (it has a config.json) or looks like a hub id, rather
    than one of our `robo-rl bc` checkpoint files."""
    from pathlib import Path

    from policies.lerobot_base import CONFIG_FILE, HUB_ID

    p = Path(str(path)).expanduser()
    return (p.is_dir() and (p / CONFIG_FILE).is_file()) or (not p.exists() and bool(HUB_ID.match(str(path))))
