"""`policy.encoder`'s settings as the encoders read them, without torch: the CLI's typed config
(`robo_rl/configs/policy.py`) takes its defaults and choices from here, so each is written once."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

KINDS = ("cnn", "resnet10")
TASK_CONDITIONINGS = ("none", "onehot")  # what of the observation's instruction the state features carry
POOLS = ("spatial_embedding", "spatial_softmax", "avg")  # resnet10 heads (policies/resnet.py)


@dataclass
class EncoderConfig:
    """`policy.encoder` in the config; policy and critics build their encoders from the same one."""

    kind: str = "cnn"
    features: int = 64  # per camera
    pretrained: str | None = None  # resnet10: a local folder/file or a hub id
    freeze: bool = False  # the backbone only; heads always train
    crops: dict[str, list[int]] = field(default_factory=dict)  # camera → [top, left, height, width] pixels
    resize: list[int] | None = None  # [height, width] after the crop
    pool: str | None = None  # resnet10 head: spatial_embedding (default) | spatial_softmax | avg
    channels: int = 32  # cnn: channels of every convolution
    kernels: list[int] = field(default_factory=lambda: [3, 3, 3, 3])  # cnn: one convolution per entry
    strides: list[int] = field(default_factory=lambda: [2, 2, 2, 1])
    task_conditioning: str = "none"  # onehot: the state features end with a one-hot of the row's instruction
    instructions: list[str] = field(default_factory=list)  # onehot: the vocabulary, in order (the env's `instructions`)
    cameras: list[str] | None = None  # the env's cameras this encoder reads (null: all; []: the state alone)

    @classmethod
    def parse(cls, spec: EncoderConfig | dict | None, image_features: int | None = None) -> EncoderConfig:
        """From the config dict; `image_features` is the older spelling of `features`."""
        if isinstance(spec, EncoderConfig):
            return spec
        spec = dict(spec or {})
        unknown = set(spec) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown policy.encoder keys {sorted(unknown)}; known: {[f.name for f in fields(cls)]}")
        if image_features is not None:
            if spec.get("features", image_features) != image_features:
                raise ValueError(
                    f"policy.image_features={image_features} and policy.encoder.features="
                    f"{spec['features']} disagree; set only policy.encoder.features"
                )
            spec["features"] = image_features
        cfg = cls(**{k: v for k, v in spec.items() if v is not None})  # null → the default
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown policy.encoder.kind '{self.kind}'; the options are {', '.join(KINDS)}")
        if self.kind != "resnet10" and (self.pretrained or self.pool):
            raise ValueError("policy.encoder.pretrained and .pool apply to kind resnet10 only")
        if self.pool is not None and self.pool not in POOLS:
            raise ValueError(f"unknown policy.encoder.pool '{self.pool}'; the options are {', '.join(POOLS)}")
        for cam, box in self.crops.items():
            if len(box) != 4 or box[0] < 0 or box[1] < 0 or box[2] < 1 or box[3] < 1:
                raise ValueError(f"policy.encoder.crops.{cam} must be [top, left, height, width], got {box}")
        if len(self.kernels) != len(self.strides) or not self.kernels or self.channels < 1:
            raise ValueError(
                f"policy.encoder.kernels {self.kernels} and .strides {self.strides} must be non-empty "
                "lists of the same length, and channels positive"
            )
        if self.task_conditioning not in TASK_CONDITIONINGS:
            raise ValueError(
                f"unknown policy.encoder.task_conditioning '{self.task_conditioning}'; the options are "
                f"{', '.join(TASK_CONDITIONINGS)}"
            )
        if self.task_conditioning == "onehot" and (
            not self.instructions or len(set(self.instructions)) != len(self.instructions)
        ):
            raise ValueError(
                "policy.encoder.task_conditioning=onehot needs the instructions it tells apart "
                "(policy.encoder.instructions: distinct, in order; robo-rl train takes them from the env's "
                f"`instructions`), got {list(self.instructions)}"
            )
        if self.resize is not None and (len(self.resize) != 2 or min(self.resize) < 1):
            raise ValueError(f"policy.encoder.resize must be [height, width], got {self.resize}")
