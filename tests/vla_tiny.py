"""A tiny SmolVLA with random weights, built offline: the real architecture (a SmolVLM backbone, its tokenizer and
processor, the flow-matching action expert) at toy sizes, saved as `lerobot-train` saves a `pretrained_model`.

SmolVLA takes its backbone by name (`vlm_model_name`, a hub id or a local folder): it builds the VLM from that
folder's config (no VLM weights are read with `load_vlm_weights=False`: they are part of SmolVLA's own weights),
reads its processor there (the tokenizer's image tokens), and its pre-processor tokenises the task with that folder's
tokenizer. So a local folder with a tiny SmolVLM config, a byte-level BPE tokenizer trained on a few sentences and a
SmolVLM processor (`robo-rl vla train`'s `vlm=tiny`, policies/smolvlm_backbone.py) stands in for
`HuggingFaceTB/SmolVLM2-500M-Video-Instruct`; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from policies.smolvlm_backbone import CORPUS, SIZES, write_smolvlm

VLM_FOLDER = "tiny_smolvlm"  # inside the pretrained_model folder, which names it by absolute path


def write_tiny_smolvla(
    folder: Path,
    state_dim: int,
    action_dim: int,
    camera: str,
    image_hw: tuple[int, int],
    chunk_size: int = 4,
    max_action_dim: int = 32,
    num_steps: int = 4,
    action_stats: dict | None = None,
    seed: int = 0,
) -> Path:
    """A SmolVLA `pretrained_model` folder (config.json, model.safetensors, its pre- and post-processors with dataset
    statistics) for a task with a state of `state_dim`, one camera `camera` of `image_hw` and actions of
    `action_dim`; random weights from `seed`. Its initial noise is (chunk_size, max_action_dim)."""
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    folder = Path(folder).resolve()
    vlm = write_smolvlm(folder / VLM_FOLDER, "tiny")
    image_size = SIZES["tiny"]["image_size"]
    cfg = SmolVLAConfig(
        **_features(state_dim, camera, image_hw, action_dim),
        chunk_size=chunk_size,
        n_action_steps=chunk_size,
        max_state_dim=max(state_dim, 8),
        max_action_dim=max_action_dim,
        resize_imgs_with_padding=(image_size, image_size),
        tokenizer_max_length=16,
        num_steps=num_steps,
        vlm_model_name=str(vlm),
        load_vlm_weights=False,
        num_vlm_layers=-1,
        device="cpu",
        push_to_hub=False,
    )
    with torch.random.fork_rng():  # the caller's random state stays as it was
        torch.manual_seed(seed)
        policy = SmolVLAPolicy(cfg)
    dataset_stats = {"observation.state": _stats(state_dim), "action": action_stats or _stats(action_dim)}
    pre, post = make_pre_post_processors(cfg, dataset_stats=dataset_stats)
    for part in (policy, pre, post):
        part.save_pretrained(folder)
    return folder


def _stats(dim: int) -> dict:
    """Mean/std, min/max and the 1st/99th percentiles (π0.5 normalises by quantiles) of a feature in [-1, 1]."""
    ones = torch.ones(dim)
    return {"mean": 0 * ones, "std": ones, "min": -ones, "max": ones, "q01": -ones, "q99": ones}


# --- π0 / π0.5 -------------------------------------------------------------------------------------------------------
# lerobot's PI0Config/PI05Config name their PaliGemma only as a variant (gemma_2b, gemma_300m) whose sizes the modeling
# module hard-codes (get_gemma_config, a SigLIP-So400m vision tower, a 257k vocabulary), and their processors tokenise
# with the hub's google/paligemma-3b-pt-224. `tiny_pi_sizes` shrinks those sizes inside lerobot's modules while it is
# active: a tiny π0/π0.5 is built and loaded (by path, by lerobot's own from_pretrained) under it, in one process. The
# tokenizer is a local folder named by path in the saved pre-processor, so loading it needs no patch.
PI_TOKENIZER = "tiny_paligemma_tokenizer"  # inside the pretrained_model folder
PI_WIDTHS = {"gemma_2b": 64, "gemma_300m": 32}  # the VLM and the action expert
PI_VOCAB = 512  # the tiny tokenizer's ids fit below it
PI_IMAGE_SIZE = 28  # two SigLIP patches of 14 a side: 4 image tokens


def _pi_modules(kind: str):
    if kind == "pi0":
        from lerobot.policies.pi0 import modeling_pi0, processor_pi0

        return modeling_pi0, processor_pi0
    if kind == "pi05":
        from lerobot.policies.pi05 import modeling_pi05, processor_pi05

        return modeling_pi05, processor_pi05
    raise ValueError(f"kind must be pi0 or pi05, got '{kind}'")


@contextlib.contextmanager
def tiny_pi_sizes(kind: str):
    """While active, lerobot's `kind` (pi0, pi05) builds a tiny PaliGemma (2 Gemma layers of width 64, a 1-layer
    SigLIP of width 32, a vocabulary of 512) and a tiny action expert (width 32). Eight heads: lerobot's joint
    attention reshapes to 8."""
    module, _ = _pi_modules(kind)
    saved = {
        name: getattr(module, name)
        for name in ("get_gemma_config", "PaliGemmaForConditionalGenerationWithPiGemma", "PiGemmaForCausalLM")
    }

    def small_gemma(variant: str):
        width = PI_WIDTHS[variant]
        return module.GemmaConfig(width=width, depth=2, mlp_dim=2 * width, num_heads=8, num_kv_heads=1, head_dim=8)

    def small_paligemma(config):
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
        for name, value in {**vision, "projection_dim": config.text_config.hidden_size}.items():
            setattr(config.vision_config, name, value)
        config.text_config.vocab_size = PI_VOCAB
        return saved["PaliGemmaForConditionalGenerationWithPiGemma"](config=config)

    def small_expert(config):
        config.vocab_size = PI_VOCAB
        return saved["PiGemmaForCausalLM"](config=config)

    module.get_gemma_config = small_gemma
    module.PaliGemmaForConditionalGenerationWithPiGemma = small_paligemma
    module.PiGemmaForCausalLM = small_expert
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def write_paligemma_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer with PaliGemma's special tokens at its ids (pad 0, eos 1, bos 2), trained on a few
    task sentences and π0.5's state prompt, saved as AutoTokenizer reads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<eos>", "<bos>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([*CORPUS, "Task: pick the cube, State: 127 128 0 255;\nAction: "], trainer)
    bpe.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])  # as PaliGemma
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    assert len(tokenizer) <= PI_VOCAB
    tokenizer.save_pretrained(folder)
    return folder


def write_tiny_pi(
    folder: Path,
    kind: str,
    state_dim: int,
    action_dim: int,
    camera: str,
    image_hw: tuple[int, int],
    chunk_size: int = 4,
    max_action_dim: int = 8,
    num_steps: int = 3,
    tokenizer_max_length: int = 48,
    seed: int = 0,
) -> Path:
    """A π0 or π0.5 (`kind`) `pretrained_model` folder (config.json, model.safetensors, its pre- and post-processors
    with dataset statistics, its tokenizer) for a task with a state of `state_dim`, one camera `camera` of `image_hw`
    and actions of `action_dim`; random weights from `seed`. Its initial noise is (chunk_size, max_action_dim). Load
    it under `tiny_pi_sizes(kind)`: lerobot would otherwise build the real sizes."""
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.processor import TokenizerProcessorStep

    folder = Path(folder).resolve()
    tokenizer = str(write_paligemma_tokenizer(folder / PI_TOKENIZER))
    module, processors = _pi_modules(kind)
    config_class = module.PI0Config if kind == "pi0" else module.PI05Config
    cfg = config_class(
        **_features(state_dim, camera, image_hw, action_dim),
        chunk_size=chunk_size,
        n_action_steps=chunk_size,
        max_state_dim=max(state_dim, 8),
        max_action_dim=max_action_dim,
        num_inference_steps=num_steps,
        image_resolution=(PI_IMAGE_SIZE, PI_IMAGE_SIZE),
        tokenizer_max_length=tokenizer_max_length,
        device="cpu",
        push_to_hub=False,
    )
    with torch.random.fork_rng(), tiny_pi_sizes(kind):  # the caller's random state stays as it was
        torch.manual_seed(seed)
        policy = get_policy_class(kind)(cfg)
    # its processor factory names the hub's PaliGemma tokenizer: the local one instead, saved by path
    hub_tokenizer = processors.TokenizerProcessorStep
    processors.TokenizerProcessorStep = lambda **kw: TokenizerProcessorStep(**{**kw, "tokenizer_name": tokenizer})
    try:
        dataset_stats = {"observation.state": _stats(state_dim), "action": _stats(action_dim)}
        pre, post = make_pre_post_processors(cfg, dataset_stats=dataset_stats)
    finally:
        processors.TokenizerProcessorStep = hub_tokenizer
    for part in (policy, pre, post):
        part.save_pretrained(folder)
    return folder


def lerobot_chunk(kind: str, folder, obs: dict, noise, camera: str, task: str):
    """lerobot's own inference on one observation and noise (its processors, `predict_action_chunk(noise=)`): the
    chunk our loader must reproduce."""
    import numpy as np
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.policies.utils import prepare_observation_for_inference

    policy = get_policy_class(kind).from_pretrained(folder)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(folder))
    raw = {"observation.state": obs["state"].copy(), f"observation.images.{camera}": obs["images"][camera].copy()}
    policy.reset()
    with torch.inference_mode():
        batch = pre(prepare_observation_for_inference(raw, torch.device("cpu"), task=task))
        chunk = post(policy.predict_action_chunk(batch, noise=torch.from_numpy(noise)[None]))
    return np.clip(chunk[0].numpy(), -1, 1)


def _features(state_dim: int, camera: str, image_hw: tuple[int, int], action_dim: int) -> dict:
    """A policy config's input and output features: a state, one camera, an action."""
    from lerobot.configs.types import FeatureType, PolicyFeature

    height, width = image_hw
    return {
        "input_features": {
            "observation.state": PolicyFeature(FeatureType.STATE, (state_dim,)),
            f"observation.images.{camera}": PolicyFeature(FeatureType.VISUAL, (3, height, width)),
        },
        "output_features": {"action": PolicyFeature(FeatureType.ACTION, (action_dim,))},
    }
