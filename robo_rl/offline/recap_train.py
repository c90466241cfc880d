"""RECAP's policy step: a flow/diffusion policy fine-tuned on every labelled action, told its indicator.

The base's checkpoint (`robo-rl bc`, `<run>/bc/policy.pt`) becomes an advantage-conditioned ChunkGenerator: its
features gain a learned label embedding (policies/advantage.py) and its first layer the matching inputs, those at zero
weight, so the new model starts as exactly the base. It is then trained by the base's own flow-matching (denoising)
loss on the chunks of all labelled episodes, each chunk with the label of the action that starts it, dropped to
"dropped" with probability `recap.cfg_dropout` (so one model is both the conditional and the unconditional one), and
saved as a generative checkpoint (`kind: generative_policy`) with `guidance` = `recap.guidance`: anything that loads a
flow policy (`policy=flow policy.path=...`, a DSRL or residual base, `robo-rl recap collect`) samples it guided.

π*0.6 fine-tunes from the pretrained base on all the data each iteration; so does this by default (`base=`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from policies.advantage import DROPPED, NEGATIVE, POSITIVE, dropped_labels
from policies.checkpoint import GENERATIVE_KIND, read_bc_checkpoint
from policies.flow import ChunkGenerator, build_generator
from robo_rl.config import ConfigError
from robo_rl.data.schema import step_fields
from robo_rl.offline.bc import chunk_batch, demos_dataset, save_atomic
from robo_rl.offline.recap import ended, load_data, read_labels


def conditioned_generator(payload: dict, width: int, guidance: float) -> ChunkGenerator:
    """The advantage-conditioned twin of a generative checkpoint, acting exactly as it does until trained (a model
    that already is conditioned is loaded as it is, its guidance set)."""
    if "advantage_embedding" in payload["config"]:
        model = build_generator(payload)
        model.guidance = float(guidance)
        model.config["guidance"] = float(guidance)
        return model
    model = ChunkGenerator(**{**payload["config"], "advantage_embedding": width, "guidance": guidance})
    state = model.state_dict()
    old_features = model.feature_dim - width
    for name, value in payload["weights"].items():
        if name == "net.0.weight":  # the first layer reads [features, label, chunk, time]: the label's columns at 0
            grown = torch.zeros_like(state[name])
            grown[:, :old_features] = value[:, :old_features]
            grown[:, old_features + width :] = value[:, old_features:]
            state[name] = grown
        else:
            state[name] = value
    model.load_state_dict(state)
    return model


def labelled_episodes(sidecar: Path, progress: bool = True) -> tuple[list, list[np.ndarray], dict]:
    """The labelled episodes, each one's label id per record (the indicator of the action taken there, read from
    the sidecar by (data, source, episode id, step); "dropped" at the final record, which starts no action), and
    the sidecar's metadata."""
    cols, meta = read_labels(sidecar)
    columns = (cols[k] for k in ("data", "source", "episode_id", "step", "positive"))
    positive = {(int(d), str(s), int(e), int(t)): bool(p) for d, s, e, t, p in zip(*columns, strict=True)}
    kept, labels = [], []
    for index, ep in load_data([Path(p) for p in meta["data"]], progress):
        key = (index, ep.source or "data", int(ep.records["episode_id"][0]), int(ep.records["step"][0]))
        if not ended(ep) or key not in positive:  # written after the labels, or never ended: not labelled
            continue
        ids = [POSITIVE if positive[(*key[:3], int(t))] else NEGATIVE for t in ep.records["step"][:-1]]
        labels.append(np.asarray([*ids, DROPPED], np.int64))
        kept.append(ep)
    if not kept:
        raise ConfigError(f"recap: no episode of {meta['data']} matches the labels in {sidecar}: label it again")
    return kept, labels, meta


def label_rows(sidecar: Path, progress: bool = True):
    """The labelled episodes as one BC dataset (every row trains) and each row's label id: the indicator of the
    action that starts its chunk."""
    from robo_rl.data.datasets import join_episodes

    kept, labels, meta = labelled_episodes(sidecar, progress)
    r = kept[0].records
    cams = {k[len("image/") :]: v.shape[1:3] for k, v in r.items() if k.startswith("image/")}
    fields = step_fields(r["state"].shape[1], r["action_executed"].shape[1], cams)
    from robo_rl.data.datasets import Episode

    trimmed = [Episode({k: e.records[k] for k in fields}, e.partition, e.source, e.instruction) for e in kept]
    data = demos_dataset(join_episodes(trimmed), 0.0, 0, str(sidecar))
    return data, np.concatenate(labels), meta


def finetune(
    sidecar: Path, base_path: Path, out: Path, settings, device="cpu", progress: bool = True
) -> tuple[ChunkGenerator, dict]:
    """Fine-tune the conditioned twin of the base at `base_path` on the labels at `sidecar`; write it to `out`."""
    payload = read_bc_checkpoint(base_path)
    if payload["kind"] != GENERATIVE_KIND:
        raise ConfigError(f"recap fine-tunes a flow or diffusion policy; {base_path} is an MLP policy")
    data, labels, meta = label_rows(sidecar, progress)
    torch.manual_seed(settings.seed)
    model = conditioned_generator(payload, settings.embedding, settings.guidance).to(device).train()
    if model.state_dim != data.buffer.fields["state"][0][0]:
        raise ConfigError(f"recap: the base {base_path} takes another state size than the labelled data")
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
    rng = np.random.default_rng(settings.seed)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    row_labels = labels[data.buffer.prev[data.train_rows]]  # the label of each row's first action
    dropped = seen = 0
    losses, start = [], time.perf_counter()
    for _ in tqdm(range(settings.updates), desc="recap fine-tune", unit="step", disable=not progress):
        pick = rng.integers(0, len(data.train_rows), min(settings.batch_size, len(data.train_rows)))
        obs, action, mask = chunk_batch(data, data.train_rows[pick], model.chunk_size, device)
        given = dropped_labels(torch.from_numpy(row_labels[pick]).to(device), settings.cfg_dropout, generator)
        obs["advantage"] = given
        dropped, seen = dropped + int((given == DROPPED).sum()), seen + len(given)
        loss = model.loss(obs, action, mask, generator)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    model.eval().cpu()
    summary = {
        "updates": settings.updates,
        "final_loss": float(np.mean(losses[-50:])),
        "train_s": time.perf_counter() - start,
        "rows": int(len(data.train_rows)),
        "positive_rows": float((row_labels == POSITIVE).mean()),
        "dropout_rate": dropped / max(seen, 1),
        "episodes": data.episodes,
        "value_version": meta.get("value_version"),
        "base": str(base_path),
        "labels": str(sidecar),
        "guidance": settings.guidance,
    }
    extra = {k: payload[k] for k in ("execute_steps", "action_range") if payload.get(k) is not None}
    save_atomic(model.checkpoint(**extra, train=summary, recap=summary), out)
    (out.with_suffix(".json")).write_text(json.dumps(summary, indent=2))
    return model, summary
