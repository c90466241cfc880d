"""A SmolVLM backbone folder for SmolVLA to build from scratch (random init): config, tokenizer and processor, as
`AutoConfig`, `AutoTokenizer` and `AutoProcessor` read them from `policy.vlm_model_name=<folder>`.

SmolVLA takes its VLM by name, a hub id or a local folder; with `load_vlm_weights=false` it builds the VLM from that
folder's config alone and reads the folder's processor (its image tokens) and tokenizer (the instruction). A size
below is the architecture only: `tiny` for tests, `reduced` for a CPU (trains in about an hour on 2 cores), and
`smolvlm2_500m`, HuggingFaceTB/SmolVLM2-500M-Video-Instruct's architecture (a SmolLM2-360M text model and a
SigLIP-B/16-512 vision tower). The tokenizer is a byte-level BPE trained on the dataset's instructions (every text
tokenises, no unknown token), a stand-in for the hub's: a VLM trained from scratch learns its own embeddings anyway.
With the real weights, name the hub id (or its downloaded folder) instead and SmolVLA reads all three from there.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_TOKENS = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
    "video_token": "<video>",
}
# a few instructions of the kind robot datasets carry, so the merges are not the dataset's alone
CORPUS = ("pick the cube", "place the cube in the box", "push the red block to the left", "open the drawer")

# name -> image size, patch, pixel-shuffle factor, text and vision fields (Idefics3 / SmolVLM config names)
SIZES: dict[str, dict] = {
    "tiny": dict(
        image_size=32,
        patch_size=8,
        scale_factor=2,
        text=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
        ),
        vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2),
    ),
    "reduced": dict(
        image_size=64,
        patch_size=8,
        scale_factor=2,
        text=dict(
            hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2
        ),
        vision=dict(hidden_size=192, intermediate_size=576, num_hidden_layers=3, num_attention_heads=3),
    ),
    "smolvlm2_500m": dict(
        image_size=512,
        patch_size=16,
        scale_factor=4,
        text=dict(
            hidden_size=960,
            intermediate_size=2560,
            num_hidden_layers=32,
            num_attention_heads=15,
            num_key_value_heads=5,
            vocab_size=49280,
            rope_theta=100000.0,
            max_position_embeddings=8192,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        vision=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12),
    ),
}


def write_smolvlm(folder: Path, size: str, instructions: list[str] = ()) -> Path:
    """A SmolVLM of architecture `size` (a key of SIZES) in `folder`: its config, a tokenizer trained on
    `instructions` and CORPUS, and its processor (square images of the size's `image_size`, no splitting)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMProcessor
    from transformers.models.smolvlm import SmolVLMImageProcessor, SmolVLMVideoProcessor

    if size not in SIZES:
        raise ValueError(f"SmolVLM size '{size}' is not one of {sorted(SIZES)}")
    sizes = SIZES[size]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<pad>", "<|im_start|>", *IMAGE_TOKENS.values()],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([*CORPUS, *instructions], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token="<pad>",
        bos_token="<|im_start|>",
        eos_token=IMAGE_TOKENS["end_of_utterance_token"],
        extra_special_tokens=dict(IMAGE_TOKENS),
    )
    image = {"longest_edge": sizes["image_size"]}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(size=image, max_image_size=image, do_image_splitting=False),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(size=image, max_image_size=image),
        image_seq_len=(sizes["image_size"] // sizes["patch_size"] // sizes["scale_factor"]) ** 2,
    )
    processor.save_pretrained(folder)
    text = dict(
        model_type="llama", vocab_size=len(tokenizer), max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id
    )
    text.update(sizes["text"])  # the 500M architecture keeps its own vocabulary size: its embedding is its cost
    vision = {**sizes["vision"], "image_size": sizes["image_size"], "patch_size": sizes["patch_size"]}
    config = SmolVLMConfig(
        text_config=text,
        vision_config=vision,
        scale_factor=sizes["scale_factor"],
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["image_token"]),
    )
    config.save_pretrained(folder)
    return folder


def image_size_of(folder: str | Path) -> int | None:
    """The square image size a local SmolVLM folder's vision tower takes; None for a hub id not on disk."""
    import json

    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    return int(json.loads(path.read_text())["vision_config"]["image_size"])
