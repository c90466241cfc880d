"""Observation encoders: the contract's observation dict → one feature vector.

Images stay uint8 until here. Per camera: `prepare` (the configured region-of-interest crop, then an optional
resize; still uint8), a backbone (float conversion, then convolutions), and a head to `features`; the state
vector and the camera features are concatenated. `kind: cnn` gives each camera its own small CNN; `kind:
resnet10` runs one ResNet-10 (optionally pretrained and frozen) on every camera, with a head per camera.

A frozen backbone keeps its weights as buffers (no grads, never in an optimiser, unchanged by
`requires_grad_(True)`), stays in eval mode, may be shared by policy and critics, and inside
`frozen_feature_cache()` computes each input tensor's features once (SAC reuses them across critic,
target critic and actor within one update).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from policies.encoder_config import EncoderConfig
from policies.resnet import IMAGENET_MEAN, IMAGENET_STD, PoolHead, ResNet10, load_resnet10

STATE_CLIP = 10.0  # a normalised state entry far outside the data it was normalised by stays a finite input


class PreparedImages(dict):
    """Camera images already cropped and resized for an encoder (maybe augmented): `forward` uses them as is."""


def image_to_float(image: torch.Tensor, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)) -> torch.Tensor:
    """uint8 [B, H, W, 3] → float32 [B, 3, H, W] (channels-last memory) as (x/255 − mean)/std.

    On CPU numpy does the uint8 → float step (torch's is 4-8× slower there). Measured at B=256, 128², one
    thread: 5-8 ms against 40-70 ms for `x.permute(0, 3, 1, 2).float() / 255`; ImageNet-normalised 18-25 ms
    against 30-170 ms (ranges: a quiet and a loaded machine). The channels-last result also speeds up the
    convolutions: our CNN forward 205 vs 330 ms, ResNet-10 forward 2.55 vs 3.79 s.
    """
    if image.device.type == "cpu":
        x = torch.from_numpy(np.multiply(image.numpy(), np.float32(1 / 255), dtype=np.float32))
    else:
        x = image.float().mul_(1 / 255)
    x = x.permute(0, 3, 1, 2)
    if any(mean) or any(s != 1 for s in std):
        mean_t, std_t = (torch.tensor(v, device=x.device).view(1, 3, 1, 1) for v in (mean, std))
        x.sub_(mean_t).div_(std_t)
    return x


class ConvEncoder(nn.Module):
    """A small CNN for one uint8 camera: strided convolutions (3×3, strides 2-2-2-1 by default), then a linear
    projection with LayerNorm and tanh."""

    def __init__(
        self,
        image_size: int | tuple[int, int],
        channels: int = 32,
        out_dim: int = 64,
        kernels: tuple[int, ...] = (3, 3, 3, 3),
        strides: tuple[int, ...] = (2, 2, 2, 1),
    ) -> None:
        super().__init__()
        h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
        layers, c_in, side = [], 3, min(h, w)
        for kernel, stride in zip(kernels, strides, strict=True):
            layers += [nn.Conv2d(c_in, channels, kernel, stride=stride), nn.ReLU()]
            c_in = channels
            side = (side - kernel) // stride + 1
        self.conv = nn.Sequential(*layers)
        if side < 1:
            raise ValueError(
                f"the cnn encoder's convolutions shrink {h}×{w} images to nothing: set "
                "policy.encoder.resize (larger) or use fewer/smaller kernels"
            )
        with torch.no_grad():
            n = self.conv(torch.zeros(1, 3, h, w)).numel()
        self.proj = nn.Sequential(nn.Linear(n, out_dim), nn.LayerNorm(out_dim), nn.Tanh())

    def head(self, fmap: torch.Tensor) -> torch.Tensor:
        return self.proj(fmap.flatten(1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(image_to_float(image)))


def _resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Antialiased bilinear resize of uint8 [B, H, W, 3] (on CPU directly in uint8, elsewhere via float)."""
    nchw = image.permute(0, 3, 1, 2)
    if image.device.type == "cpu":
        return F.interpolate(nchw, size=size, mode="bilinear", antialias=True).permute(0, 2, 3, 1)
    out = F.interpolate(nchw.float(), size=size, mode="bilinear", antialias=True)
    return out.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def freeze_(module: nn.Module) -> nn.Module:
    """Weights → buffers (no grads, out of every optimiser), eval mode, marked for the feature cache."""
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None:
                del sub._parameters[name]
                sub.register_buffer(name, param.detach().requires_grad_(False))
    module.is_frozen_backbone = True
    module.feature_cache = None
    return module.eval()


def frozen_backbones(*modules: nn.Module) -> list[nn.Module]:
    seen = {id(m): m for module in modules for m in module.modules() if getattr(m, "is_frozen_backbone", False)}
    return list(seen.values())


@contextlib.contextmanager
def frozen_feature_cache(*modules: nn.Module):
    """Within the block, a frozen backbone computes each input tensor's features once."""
    backbones = frozen_backbones(*modules)
    for backbone in backbones:
        backbone.feature_cache = {}
    try:
        yield
    finally:
        for backbone in backbones:
            backbone.feature_cache = None


class ObservationEncoder(nn.Module):
    """Concatenates the state vector with one feature vector per camera."""

    def __init__(
        self,
        state_dim: int,
        cameras: dict[str, int | tuple[int, int]],
        image_features: int = 64,
        config: EncoderConfig | None = None,
        share_frozen_from: ObservationEncoder | None = None,  # freeze: reuse its backbone module (policy → critic)
    ) -> None:
        super().__init__()
        self.config = config = config or EncoderConfig(features=image_features)
        self.state_dim = state_dim
        cameras = self._read(cameras, config.cameras)
        self.sizes = sizes = {name: (s, s) if isinstance(s, int) else tuple(s) for name, s in cameras.items()}
        self.crops = self._check_crops(config.crops, sizes)
        prepared = {
            name: tuple(config.resize or self.crops.get(name, (0, 0, *size))[2:]) for name, size in sizes.items()
        }
        donor = share_frozen_from if config.freeze and share_frozen_from is not None else None
        if config.kind == "cnn":
            self.mean, self.std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
            self.cameras = nn.ModuleDict(
                {
                    name: ConvEncoder(hw, config.channels, config.features, config.kernels, config.strides)
                    for name, hw in prepared.items()
                }
            )
            for name, camera in self.cameras.items():
                if donor is not None:
                    camera.conv = donor.cameras[name].conv
                elif config.freeze:
                    freeze_(camera.conv)
        else:
            self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD
            self.backbone = donor.backbone if donor is not None else self._resnet10(config) if cameras else None
            self.cameras = nn.ModuleDict()
            for name, (h, w) in prepared.items():
                with torch.no_grad():
                    probe = torch.zeros(1, 3, h, w, device=module_device(self.backbone))
                    _, c, fh, fw = self.backbone(probe).shape
                self.cameras[name] = PoolHead(config.pool or "spatial_embedding", c, fh, fw, config.features)
        # onehot task conditioning: the state features end with a one-hot of the row's instruction over the vocabulary
        self.instructions = list(config.instructions) if config.task_conditioning == "onehot" else []
        self._instruction_index = {text: i for i, text in enumerate(self.instructions)}
        self.out_dim = state_dim + len(self.instructions) + config.features * len(cameras)
        self.state_normalised = False  # see set_state_normalisation

    def set_state_normalisation(self, mean, std, clip: float = STATE_CLIP) -> None:
        """From now on the state enters as (state − mean) / std, clipped to ±clip: raw units (metres, radians)
        whose informative part moves by millimetres become inputs of about unit size. Buffers that follow
        `.to(device)` and copies but are not in the state dict: every process derives them from the same source
        (a residual's base), as the weights' receivers rebuild the policy from the same config."""
        mean, std = (torch.as_tensor(v, dtype=torch.float32).detach().clone().reshape(-1) for v in (mean, std))
        if mean.shape != (self.state_dim,) or std.shape != (self.state_dim,):
            raise ValueError(
                f"state statistics of {mean.shape[0]}/{std.shape[0]} entries for a {self.state_dim}-entry state"
            )
        self.register_buffer("state_mean", mean, persistent=False)
        self.register_buffer("state_std", std, persistent=False)
        self.state_clip, self.state_normalised = float(clip), True

    def copy_state_normalisation(self, other: ObservationEncoder) -> None:
        """The same state normalisation as `other` (a critic's encoder from its policy's), or none."""
        if getattr(other, "state_normalised", False):
            self.set_state_normalisation(other.state_mean, other.state_std, other.state_clip)  # on its device

    @staticmethod
    def _resnet10(config: EncoderConfig) -> ResNet10:
        model = load_resnet10(config.pretrained) if config.pretrained else ResNet10()
        return freeze_(model) if config.freeze else model

    @staticmethod
    def _read(cameras: dict, chosen: list[str] | None) -> dict:
        """The env's cameras this encoder reads: `policy.encoder.cameras` (null: all), each one the env has."""
        if chosen is None:
            return cameras
        unknown = [name for name in chosen if name not in cameras]
        if unknown:
            raise ValueError(
                f"policy.encoder.cameras names {unknown}, which the env does not have; "
                f"it has {sorted(cameras) or 'none'}"
            )
        return {name: cameras[name] for name in chosen}

    @staticmethod
    def _check_crops(crops: dict, sizes: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int, int, int]]:
        unknown = set(crops) - set(sizes)
        if unknown:
            raise ValueError(
                f"policy.encoder.crops names cameras {sorted(unknown)}; the env has {sorted(sizes) or 'none'}"
            )
        for name, (top, left, h, w) in crops.items():
            if top + h > sizes[name][0] or left + w > sizes[name][1]:
                raise ValueError(
                    f"policy.encoder.crops.{name} = {[top, left, h, w]} reaches outside the "
                    f"{sizes[name][0]}×{sizes[name][1]} image"
                )
        return {name: tuple(box) for name, box in crops.items()}

    def prepare(self, images: dict[str, torch.Tensor]) -> PreparedImages:
        """Crop each camera to its region of interest, then resize; uint8 in, uint8 out."""
        if isinstance(images, PreparedImages):
            return images
        out = PreparedImages()
        for name in self.cameras:
            image = images[name]
            if name in self.crops:
                if tuple(image.shape[1:3]) != self.sizes[name]:  # e.g. cropped twice: a dict lost its type
                    raise ValueError(
                        f"camera '{name}' image is {tuple(image.shape[1:3])}, the crop expects the "
                        f"env's {self.sizes[name]}; pass prepared images as PreparedImages"
                    )
                top, left, h, w = self.crops[name]
                image = image[:, top : top + h, left : left + w]
            if self.config.resize is not None and tuple(image.shape[1:3]) != tuple(self.config.resize):
                image = _resize(image, tuple(self.config.resize))
            out[name] = image
        return out

    def backbone_of(self, name: str) -> nn.Module:
        return self.backbone if self.config.kind == "resnet10" else self.cameras[name].conv

    def _features(self, backbone: nn.Module, image: torch.Tensor) -> torch.Tensor:
        cache = getattr(backbone, "feature_cache", None)
        hit = cache.get(id(image)) if cache is not None else None
        if hit is not None and hit[0] is image:  # the entry holds `image`, so its id is not reused meanwhile
            return hit[1]
        fmap = backbone(image_to_float(image, self.mean, self.std))
        if cache is not None:
            cache[id(image)] = (image, fmap)
        return fmap

    def forward(self, obs: dict) -> torch.Tensor:
        images = self.prepare(obs["images"]) if self.cameras else {}
        state = obs["state"]
        if self.state_normalised:
            state = ((state - self.state_mean) / self.state_std).clamp(-self.state_clip, self.state_clip)
        parts = [state, self.task_onehot(obs, state)] if self.instructions else [state]
        for name, camera in self.cameras.items():
            fmap = self._features(self.backbone_of(name), images[name])
            parts.append(camera.head(fmap) if isinstance(camera, ConvEncoder) else camera(fmap))
        return torch.cat(parts, dim=-1)

    def task_onehot(self, obs: dict, state: torch.Tensor) -> torch.Tensor:
        """[B, len(instructions)]: each row's instruction (obs["instruction"], one str per row, or one str for
        all) as a one-hot over the vocabulary; ValueError naming a row's instruction that is not in it (or none)."""
        given = obs.get("instruction")
        rows = len(state)
        texts = [given] * rows if given is None or isinstance(given, str) else list(given)
        if len(texts) != rows:
            raise ValueError(f"the observation has {len(texts)} instructions for {rows} rows")
        index = [self._instruction_index.get(text, -1) for text in texts]
        if rows and min(index) < 0:
            text = texts[index.index(-1)]
            raise ValueError(
                f"an observation's instruction {text!r} is not one this policy was built for "
                f"(policy.encoder.task_conditioning=onehot over {self.instructions})"
            )
        out = torch.zeros(rows, len(self.instructions), dtype=state.dtype, device=state.device)
        out[torch.arange(rows, device=state.device), torch.tensor(index, device=state.device)] = 1.0
        return out

    def train(self, mode: bool = True) -> ObservationEncoder:
        super().train(mode)
        for backbone in frozen_backbones(self):
            backbone.eval()  # frozen means frozen: no normalisation statistics move
        return self


def module_device(module: nn.Module) -> torch.device:
    """Where a module's weights are (a frozen backbone may hold them as buffers only)."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def encoder_for_space(
    observation_space,
    image_features: int = 64,
    config: EncoderConfig | dict | None = None,
    share_frozen_from: ObservationEncoder | None = None,
) -> ObservationEncoder:
    """Build the encoder that matches a contract observation space (a gymnasium Dict)."""
    config = EncoderConfig.parse(config) if config is not None else EncoderConfig(features=image_features)
    state_dim = observation_space["state"].shape[0]
    cams = {name: tuple(space.shape[:2]) for name, space in observation_space["images"].spaces.items()}
    return ObservationEncoder(state_dim, cams, config=config, share_frozen_from=share_frozen_from)
