"""HIL-SERL's ResNet-10 image backbone, pooling heads, and loading its pretrained weights.

The layout (module names, GroupNorm with 4 groups, JAX-style 'SAME' padding) follows the ResNet-10 that
HIL-SERL trained in JAX and that LeRobot's SAC loads as `helper2424/resnet10` (`AutoModel`, remote code),
so that checkpoint's `model.safetensors` loads here key for key:

    embedder.0.weight                               7×7 conv, 3 → 64, stride 2
    embedder.1.group_norm.{weight,bias}
    encoder.stages.{0..3}.conv{1,2}.conv.weight     3×3 convs of each BasicBlock
    encoder.stages.{0..3}.norm{1,2}.group_norm.{weight,bias}
    encoder.stages.{1..3}.shortcut.0.conv.weight    1×1 stride-2 projection where the width changes
    encoder.stages.{1..3}.shortcut.1.group_norm.{weight,bias}

Inputs are ImageNet-normalised RGB in [B, 3, H, W]; a 128² image gives a [B, 512, 4, 4] feature map.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from policies.encoder_config import POOLS

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
WIDTHS = (64, 128, 256, 512)
WEIGHTS_FILE = "model.safetensors"


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow/JAX 'SAME' padding: output ceil(size/stride), the odd pixel of padding at the end."""
    total = max(0, (math.ceil(size / stride) - 1) * stride + kernel - size)
    return total // 2, total - total // 2


class SameConv2d(nn.Module):
    """A bias-free convolution with 'SAME' padding (asymmetric for stride 2 on even sizes, as in JAX)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.kernel, self.stride = kernel, stride
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top, bottom = _same_padding(x.shape[-2], self.kernel, self.stride)
        left, right = _same_padding(x.shape[-1], self.kernel, self.stride)
        if top == bottom and left == right:  # symmetric: let the convolution pad, no copy
            return F.conv2d(x, self.conv.weight, stride=self.stride, padding=(top, left))
        return self.conv(F.pad(x, (left, right, top, bottom)))


class SameMaxPool2d(nn.Module):
    """3×3 stride-2 max pooling with 'SAME' padding (padding never wins the max)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (top, bottom), (left, right) = _same_padding(x.shape[-2], 3, 2), _same_padding(x.shape[-1], 3, 2)
        if (top, bottom, left, right) == (0, 1, 0, 1):  # even sizes: ceil_mode is exactly that, without a copy
            return F.max_pool2d(x, 3, 2, ceil_mode=True)
        if top == bottom and left == right:
            return F.max_pool2d(x, 3, 2, padding=(top, left))
        return F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), 3, 2)


class GroupNorm4(nn.Module):
    """GroupNorm with 4 groups; the wrapper only gives the weights their checkpoint name (`.group_norm`)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.group_norm = nn.GroupNorm(4, channels, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group_norm(x)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = SameConv2d(c_in, c_out, 3, stride), GroupNorm4(c_out)
        self.conv2, self.norm2 = SameConv2d(c_out, c_out, 3), GroupNorm4(c_out)
        self.shortcut = nn.Sequential(SameConv2d(c_in, c_out, 1, stride), GroupNorm4(c_out)) if c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.norm2(self.conv2(F.relu(self.norm1(self.conv1(x)))))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class _Stages(nn.Module):
    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        c_ins = (widths[0], *widths[:-1])
        self.stages = nn.ModuleList(
            BasicBlock(c, w, 1 if i == 0 else 2) for i, (c, w) in enumerate(zip(c_ins, widths, strict=True))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


class ResNet10(nn.Module):
    """ResNet-10: a 7×7 stem and max pool, then one BasicBlock per stage at widths 64-128-256-512."""

    def __init__(self, widths: tuple[int, ...] = WIDTHS) -> None:
        super().__init__()
        self.widths = tuple(widths)
        self.embedder = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
            GroupNorm4(widths[0]),
            nn.ReLU(),
            SameMaxPool2d(),
        )
        self.encoder = _Stages(self.widths)

    @property
    def out_channels(self) -> int:
        return self.widths[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] ImageNet-normalised → [B, 512, H/32, W/32] (rounded up)."""
        return self.encoder(self.embedder(x))


# --- heads: a feature map → one vector per camera ----------------------------------------------------
class SpatialEmbedding(nn.Module):
    """HIL-SERL's learned spatial embeddings: per channel, `num` learned weightings of the map's positions."""

    def __init__(self, channels: int, height: int, width: int, num: int = 8) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(channels, height * width, num))
        nn.init.kaiming_normal_(self.kernel, mode="fan_in", nonlinearity="linear")
        self.out_dim = channels * num

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        # [B, C, HW] × [C, HW, num] → [B, C, num], one small matmul per channel
        return torch.einsum("bcp,cpn->bcn", fmap.flatten(2), self.kernel).flatten(1)


class SpatialSoftmax(nn.Module):
    """Expected (x, y) image position of each channel's softmax over positions (2 keypoint coords per channel)."""

    def __init__(self, channels: int, height: int, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.flatten(), ys.flatten()], dim=1), persistent=False)  # [HW, 2]
        self.out_dim = 2 * channels

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        attention = fmap.flatten(2).softmax(dim=-1)  # [B, C, HW]
        return (attention @ self.grid).flatten(1)


class GlobalAvgPool(nn.Module):
    def __init__(self, channels: int, height: int, width: int) -> None:
        super().__init__()
        self.out_dim = channels

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        return fmap.mean(dim=(2, 3))


class PoolHead(nn.Module):
    """A feature map → `features`: a pooling, then Linear + LayerNorm + tanh."""

    def __init__(self, pool: str, channels: int, height: int, width: int, features: int) -> None:
        super().__init__()
        pools = {"spatial_embedding": SpatialEmbedding, "spatial_softmax": SpatialSoftmax, "avg": GlobalAvgPool}
        if pool not in pools:
            raise ValueError(f"unknown encoder pool '{pool}'; the options are {', '.join(POOLS)}")
        self.pool = pools[pool](channels, height, width)
        self.proj = nn.Sequential(nn.Linear(self.pool.out_dim, features), nn.LayerNorm(features), nn.Tanh())

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        return self.proj(self.pool(fmap))


# --- weights on disk and on the hub ------------------------------------------------------------------
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TORCH_FILES = ("pytorch_model.bin", "*.pt", "*.pth", "*.bin")


def _resolve(source: str | Path) -> Path:
    """A local file or folder as is; otherwise a hub id, downloaded (or taken from the hub cache)."""
    path = Path(source).expanduser()
    if path.exists():
        return path
    if not _HUB_ID.match(str(source)):
        raise FileNotFoundError(f"ResNet-10 weights '{source}': no such file or folder")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=str(source), allow_patterns=["*.safetensors", "*.json", *_TORCH_FILES]))
    except Exception as e:  # offline, unknown repo, no access: all end here with the reason
        raise FileNotFoundError(
            f"ResNet-10 weights '{source}': no such local file or folder, and fetching it as a Hugging Face hub "
            f"id failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None


def _weights_file(path: Path, source) -> Path:
    if path.is_file():
        return path
    for pattern in (WEIGHTS_FILE, "*.safetensors", *_TORCH_FILES):
        found = sorted(path.glob(pattern))
        if found:
            return found[0]
    raise FileNotFoundError(f"ResNet-10 weights '{source}': no {WEIGHTS_FILE} or torch state dict in {path}")


def read_state_dict(source: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a ResNet-10 checkpoint (safetensors or a torch state dict), keys in the layout above."""
    file = _weights_file(_resolve(source), source)
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(file))
        else:
            state = torch.load(file, map_location="cpu", weights_only=True)
            state = state.get("state_dict", state) if isinstance(state, dict) else state
    except Exception as e:
        raise ValueError(f"ResNet-10 weights '{source}': cannot read {file.name} ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"ResNet-10 weights '{source}': {file.name} is not a state dict of tensors")
    # a checkpoint saved from a wrapper ("model.embedder.0.weight"): drop the prefix before the stem
    stem = next((k for k in state if k.endswith("embedder.0.weight")), None)
    prefix = stem[: -len("embedder.0.weight")] if stem else ""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def load_resnet10(source: str | Path, model: ResNet10 | None = None) -> ResNet10:
    """Pretrained ResNet-10 weights from a local folder/file or a hub id (e.g. `helper2424/resnet10`)."""
    model = model if model is not None else ResNet10()
    state = read_state_dict(source)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [
        f"{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or wrong:
        problems = [
            f"{name}: {', '.join(keys[:4])}{' …' if len(keys) > 4 else ''}"
            for name, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
            if keys
        ]
        raise ValueError(f"ResNet-10 weights '{source}' do not fit ResNet-10 ({'; '.join(problems)})")
    model.load_state_dict(state)
    return model


def save_resnet10(model: ResNet10, path: str | Path) -> Path:
    """Write `model.safetensors` and a `config.json` (HF layout) into folder `path`; returns the folder."""
    from safetensors.torch import save_file

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(folder / WEIGHTS_FILE))
    config = {
        "model_type": "resnet10",
        "num_channels": 3,
        "embedding_size": model.widths[0],
        "hidden_sizes": list(model.widths),
        "depths": [1] * len(model.widths),
        "hidden_act": "relu",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
