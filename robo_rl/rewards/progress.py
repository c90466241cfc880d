"""A pairwise progress critic in the VLAC style: two frames and an instruction in, the signed progress from the first
to the second out; per frame, how far along the task it is and whether it is done.

Two backbones behind one class (`backbone`):
  small   a CNN per camera (policies/encoders.py) and a bag-of-words text embedding: trains on this CPU in minutes
  siglip  a SigLIP vision-language model from `transformers` (a hub id or a local folder: `backbone_path`), its image
          and text towers under our heads, frozen by default, as a user with a GPU runs it

Training (`train_progress_critic`) uses the anchors' negatives: pairs of a successful episode forward (progress
(j − i) / T) and reversed (its negative), stalled pairs (a frame against itself: zero), pairs of failed episodes
(zero), and a successful episode under a mismatched instruction (zero progress, never done). The done head's
positives are the frames the records flag as a success and a successful episode's last `done_last` frames.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from policies.encoders import ConvEncoder, _resize, image_to_float
from robo_rl.rewards.base import RewardModel, RewardModelError, Scores, Task

log = logging.getLogger(__name__)

BACKBONES = ("small", "siglip")
VOCAB = 4096  # hashed words of the small backbone's text embedding


def hashed_words(text: str, vocab: int = VOCAB, length: int | None = None) -> list[int]:
    """Word ids by a stable hash (the same in every process); padded with 0 / cut to `length` when given."""
    ids = [1 + zlib.crc32(w.encode()) % (vocab - 1) for w in text.lower().replace(",", " ").split()] or [0]
    return ids if length is None else (ids + [0] * length)[:length]


class SmallBackbone(nn.Module):
    def __init__(self, cameras: tuple[str, ...], size: int = 32, channels: int = 16, features: int = 64) -> None:
        super().__init__()
        self.size, self.cameras = size, cameras
        self.images = nn.ModuleDict({c: ConvEncoder(size, channels, features, (3, 3, 3), (2, 2, 1)) for c in cameras})
        self.text = nn.EmbeddingBag(VOCAB, features, mode="mean", padding_idx=0)
        self.image_dim, self.text_dim = features * len(cameras), features

    def encode_images(self, frames: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([self.images[c](_resize(frames[c], (self.size, self.size))) for c in self.cameras], -1)

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        ids = [hashed_words(t) for t in texts]
        offsets = torch.tensor(np.cumsum([0] + [len(i) for i in ids[:-1]]), dtype=torch.long)
        return torch.tanh(self.text(torch.tensor(sum(ids, []), dtype=torch.long), offsets))


class SiglipBackbone(nn.Module):
    """SigLIP's towers: each camera through the vision tower (its pooled embedding), the instruction through the text
    tower (its tokenizer when the folder or hub id has one, else hashed word ids into its vocabulary, said once)."""

    def __init__(self, cameras: tuple[str, ...], path: str, freeze: bool = True) -> None:
        super().__init__()
        from transformers import AutoTokenizer, SiglipModel

        from policies.lerobot_base import resolve_pretrained

        try:
            self.model = SiglipModel.from_pretrained(str(resolve_pretrained(path)))
        except (OSError, ValueError) as e:
            raise RewardModelError(
                f"reward.backbone_path={path}: not a SigLIP model ({str(e).splitlines()[0]})"
            ) from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(resolve_pretrained(path)))
        except (OSError, ValueError, TypeError):
            self.tokenizer = None
            log.warning("%s has no tokenizer: instructions go in as hashed word ids", path)
        self.cameras, self.freeze = cameras, freeze
        if freeze:
            self.model.requires_grad_(False).eval()
        vision, text = self.model.config.vision_config, self.model.config.text_config
        self.size, self.max_len, self.vocab = vision.image_size, text.max_position_embeddings, text.vocab_size
        self.image_dim, self.text_dim = vision.hidden_size * len(cameras), text.hidden_size

    def train(self, mode: bool = True):
        super().train(mode)
        if self.freeze:
            self.model.eval()
        return self

    def encode_images(self, frames: dict[str, torch.Tensor]) -> torch.Tensor:
        out = []
        for c in self.cameras:  # SigLIP's own preprocessing: resize, [0, 1], normalise by 0.5 / 0.5
            x = image_to_float(_resize(frames[c], (self.size, self.size)), (0.5,) * 3, (0.5,) * 3)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze):
                out.append(self.model.vision_model(pixel_values=x).pooler_output)
        return torch.cat(out, -1)

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        if self.tokenizer is not None:
            ids = self.tokenizer(
                texts, padding="max_length", truncation=True, max_length=self.max_len, return_tensors="pt"
            )["input_ids"]
        else:
            ids = torch.tensor([hashed_words(t, self.vocab, self.max_len) for t in texts], dtype=torch.long)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze):
            return self.model.text_model(input_ids=ids).pooler_output


class ProgressNet(nn.Module):
    def __init__(self, backbone: nn.Module, hidden: int = 128) -> None:
        super().__init__()
        self.backbone = backbone
        i, t = backbone.image_dim, backbone.text_dim

        def mlp(n_in: int, n_out: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_out)
            )

        self.frame_head = mlp(i + t, 2)  # progress logit, done logit
        self.pair_head = mlp(3 * i + t, 1)  # signed progress from a to b

    def forward(self, b: dict, text: list[str], a: dict | None = None):
        fb, ft = self.backbone.encode_images(b), self.backbone.encode_text(text)
        progress, done = self.frame_head(torch.cat([fb, ft], -1)).unbind(-1)
        delta = None
        if a is not None:
            fa = self.backbone.encode_images(a)
            delta = torch.tanh(self.pair_head(torch.cat([fa, fb, fb - fa, ft], -1))).squeeze(-1)
        return progress, done, delta


class ProgressCritic(RewardModel):
    kind = "progress"
    provides = ("progress", "delta", "success_prob")

    def __init__(
        self,
        cameras,
        instructions=(),
        backbone: str = "small",
        backbone_path: str | None = None,
        size: int = 32,
        channels: int = 16,
        features: int = 64,
        hidden: int = 128,
        freeze: bool = True,
    ) -> None:
        super().__init__(tuple(cameras), tuple(instructions))
        if backbone not in BACKBONES:
            raise RewardModelError(f"progress critic backbone '{backbone}': one of {', '.join(BACKBONES)}")
        self.settings = {
            "backbone": backbone,
            "backbone_path": backbone_path,
            "size": size,
            "channels": channels,
            "features": features,
            "hidden": hidden,
            "freeze": freeze,
        }
        if backbone == "siglip":
            if not backbone_path:
                raise RewardModelError("the siglip backbone needs backbone_path (a hub id or a local folder)")
            net = SiglipBackbone(self.cameras, backbone_path, freeze)
        else:
            net = SmallBackbone(self.cameras, size, channels, features)
        self.net = ProgressNet(net, hidden)

    def config(self) -> dict:
        return {**super().config(), **self.settings}

    @classmethod
    def from_config(cls, config: dict) -> ProgressCritic:
        known = ("backbone", "backbone_path", "size", "channels", "features", "hidden", "freeze")
        return cls(config["cameras"], config.get("instructions", ()), **{k: config[k] for k in known if k in config})

    def state_dict(self) -> dict:
        return self.net.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state)

    @torch.no_grad()
    def score(self, frames, task: Task, previous=None) -> Scores:
        n = self.check_frames(frames)
        if previous is not None and self.check_frames(previous) != n:
            raise RewardModelError("`previous` must hold as many frames as `frames`")
        self.check_instruction(task.instruction)
        self.net.eval()
        b = {c: torch.as_tensor(frames[c]) for c in self.cameras}  # uint8 [N, H, W, 3], as the encoders take them
        a = None if previous is None else {c: torch.as_tensor(previous[c]) for c in self.cameras}
        progress, done, delta = self.net(b, [task.instruction] * n, a)
        return Scores(
            progress=torch.sigmoid(progress).numpy().astype(np.float32),
            delta=None if delta is None else delta.numpy().astype(np.float32),
            success_prob=torch.sigmoid(done).numpy().astype(np.float32),
        )

    def score_episode(self, frames, task: Task) -> Scores:
        """Per frame progress and done; delta from each frame's predecessor (0 for the first)."""
        prev = {c: np.concatenate([frames[c][:1], frames[c][:-1]]) for c in self.cameras}
        scores = self.score(frames, task, previous=prev)
        scores.delta[0] = 0.0
        return scores


# --- training -----------------------------------------------------------------------------------------------------
@dataclass
class _Pairs:
    a: dict
    b: dict
    text: list
    delta: torch.Tensor
    progress: torch.Tensor
    progress_weight: torch.Tensor
    done: torch.Tensor


def _sample(episodes, instructions, others, cameras, batch, rng, done_last) -> _Pairs:
    """A batch of the five kinds of pair (forward, reversed, stalled, failed, mismatched instruction)."""
    ok = [k for k, e in enumerate(episodes) if e.success]
    failed = [k for k, e in enumerate(episodes) if not e.success]
    rows = []
    for kind in rng.choice(5, batch, p=[0.3, 0.2, 0.15, 0.15 if failed else 0.0, 0.2 if failed else 0.35]):
        k = int(rng.choice(failed if kind == 3 else ok))
        e, text = episodes[k], instructions[k]
        t = len(e)
        i, j = sorted(rng.integers(0, t + 1, 2))
        if kind == 1:
            i, j = j, i
        elif kind == 2:
            i = j
        wrong = kind == 4 and others
        if wrong:
            text = str(rng.choice([o for o in others if o != text] or ["do something else"]))
        delta = (j - i) / max(t, 1) if kind in (0, 1) else 0.0
        prog = 0.0 if wrong or kind == 3 else j / max(t, 1)
        weight = 0.0 if kind == 3 else 1.0  # how far a failure got is unknown
        # done: the frame shows a success (its record's flag: the simulator's check or a person's label, so a success
        # held for several steps is done on each of them), or it is among a successful episode's last `done_last`
        done = float(not wrong and (bool(e.records["success"][j]) or (e.success and j >= t + 1 - done_last)))
        rows.append((e, i, j, text, delta, prog, weight, done))

    def frames(idx: int) -> dict:
        return {c: torch.as_tensor(np.stack([r[0].records[f"image/{c}"][r[idx]] for r in rows])) for c in cameras}

    def col(idx: int) -> torch.Tensor:
        return torch.tensor([r[idx] for r in rows], dtype=torch.float32)

    return _Pairs(frames(1), frames(2), [r[3] for r in rows], col(4), col(5), col(6), col(7))


def train_progress_critic(
    episodes,
    cameras,
    instructions,
    *,
    other_instructions=(),
    steps: int = 2000,
    batch_size: int = 64,
    lr: float = 3e-4,
    seed: int = 0,
    done_last: int = 3,
    progress: bool = True,
    **model_kwargs,
) -> ProgressCritic:
    """Train on `episodes` (each with its instruction in `instructions`); `other_instructions` give the mismatches
    (the other episodes' instructions are used too)."""
    from tqdm import tqdm

    from policies.augment import random_shift

    if not any(e.success for e in episodes):
        raise RewardModelError("the progress critic needs successful episodes (demonstrations) to learn from")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    trained = tuple(dict.fromkeys(instructions))
    others = tuple(dict.fromkeys((*trained, *other_instructions)))
    model = ProgressCritic(cameras, trained, **model_kwargs)
    net = model.net.train()
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    bar = tqdm(range(steps), desc="progress critic", unit="step", disable=not progress)
    for _ in bar:
        p = _sample(episodes, instructions, others, cameras, batch_size, rng, done_last)
        a = {c: random_shift(x, 2) for c, x in p.a.items()}
        b = {c: random_shift(x, 2) for c, x in p.b.items()}
        logit_p, logit_d, delta = net(b, p.text, a)
        loss_p = F.binary_cross_entropy_with_logits(logit_p, p.progress, reduction="none") * p.progress_weight
        loss = 10.0 * F.mse_loss(delta, p.delta) + loss_p.mean() + F.binary_cross_entropy_with_logits(logit_d, p.done)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    net.eval()
    return model


# --- quality --------------------------------------------------------------------------------------------------------
def spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def evaluate_progress(model: ProgressCritic, episodes, instructions, wrong_instruction: str) -> dict:
    """VLAC's checks on held-out episodes: value-order correlation of the summed pairwise progress along each
    successful episode (≥ 0.9 wanted) and along it reversed (≤ −0.8), the progress a wrong instruction gets against
    the right one, and the progress of stalled clips (a frame against itself); and the done head as a success
    detector on all of them (frame AUROC, and true/false-positive rates at 0.5, the shaper's default threshold)."""
    from robo_rl.rewards.classifier_fit import auroc

    model.expect_instruction(wrong_instruction)  # measured against the right one, not a user's mistake
    forward, backward, right, wrong, stalled = [], [], [], [], []
    done_p, done_y = [], []
    for e, text in zip(episodes, instructions, strict=True):
        frames = {c: e.records[f"image/{c}"] for c in model.cameras}
        # success_prob is per frame (the pair's first frame does not enter it): one scoring serves both checks
        s = model.score_episode(frames, Task(text)) if e.success else model.score(frames, Task(text))
        done_p.append(s.success_prob)
        done_y.append(np.asarray(e.records["success"], bool).reshape(-1))
        if not e.success:
            continue
        t = np.arange(len(s.delta))
        forward.append(spearman(np.cumsum(s.delta), t))
        back = model.score_episode({c: f[::-1].copy() for c, f in frames.items()}, Task(text))
        backward.append(spearman(np.cumsum(back.delta), t))
        right.append(float(s.progress[-1]))
        wrong.append(float(model.score({c: f[-1:] for c, f in frames.items()}, Task(wrong_instruction)).progress[0]))
        stalled.append(float(np.abs(model.score(frames, Task(text), previous=frames).delta).mean()))
    p, y = np.concatenate(done_p), np.concatenate(done_y)
    return {
        "episodes": len(forward),
        "voc": float(np.mean(forward)),
        "voc_reversed": float(np.mean(backward)),
        "final_progress_right": float(np.mean(right)),
        "final_progress_wrong": float(np.mean(wrong)),
        "stalled_abs_delta": float(np.mean(stalled)),
        # the done head as a success detector on every held-out frame the records flag (the shaper ends an
        # episode at success_threshold, 0.5 by default)
        "done_auroc": auroc(p, y) if y.any() and (~y).any() else float("nan"),
        "done_tpr_at_0.5": float((p[y] >= 0.5).mean()) if y.any() else float("nan"),
        "done_fpr_at_0.5": float((p[~y] >= 0.5).mean()) if (~y).any() else float("nan"),
    }
