"""The acting policies' settings (`policy`, and its `encoder`, `base` and `model` sub-blocks): one typed field each,
with its default, range and meaning. `launch/conf/policy/<name>.yaml` names the class and what differs. Keyed by the
classes' paths as strings: `policies` never imports robo_rl, and the CLI reads this before torch is imported. The
encoder's defaults and choices are `policies.encoder_config`'s (the encoders read that without a config), written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.encoder_config import KINDS, POOLS, TASK_CONDITIONINGS, EncoderConfig
from robo_rl.configs.parl import ParlPolicyConfig
from robo_rl.configs.typed import FIXED, setting

ENCODER = EncoderConfig()
ACTOR_HIDDEN = (256, 256)
GENERATIVE_KINDS = ("flow", "diffusion")
STATE_NORMS = ("none", "base")
STATE_NORM = (
    "base: read the state normalised by the base's training statistics (for envs whose state is in raw units, "
    "e.g. robosuite's metres) | none: raw"
)


@dataclass
class PolicyEncoderConfig:
    """`policy.encoder`: the observation encoder; policy and critics each build one from it (their own weights)."""

    blocks: ClassVar[tuple[str, ...]] = ("crops",)  # region of interest per camera: {front: [top, left, h, w]}

    kind: str = setting(
        ENCODER.kind, "cnn: a small CNN per camera | resnet10: one ResNet-10 shared by the cameras", choices=KINDS
    )
    features: int = setting(ENCODER.features, "encoder features per camera, concatenated with the state", low=1)
    pretrained: str | None = setting(ENCODER.pretrained, "resnet10 only: a local folder/file or a Hugging Face hub id")
    freeze: bool = setting(ENCODER.freeze, "keep the backbone's weights fixed (heads still train)")
    resize: tuple[int, int] | None = setting(ENCODER.resize, "[height, width] after the crop", low=1)
    pool: str | None = setting(ENCODER.pool, "resnet10 head (null: spatial_embedding)", choices=POOLS)
    channels: int = setting(ENCODER.channels, "cnn: channels of each convolution", low=1)
    kernels: tuple[int, ...] = setting(tuple(ENCODER.kernels), "cnn: kernel size of each convolution", low=1)
    strides: tuple[int, ...] = setting(tuple(ENCODER.strides), "cnn: stride of each convolution", low=1)
    task_conditioning: str = setting(
        ENCODER.task_conditioning,
        "none | onehot: the state features of actor and critics end with a one-hot of the row's instruction (a "
        "multi-task run: the env's instructions tell tasks apart)",
        choices=TASK_CONDITIONINGS,
    )
    instructions: tuple[str, ...] = setting(
        tuple(ENCODER.instructions),
        "onehot: the instructions it tells apart, in order (empty: the env's `instructions`, written here by train)",
    )
    cameras: tuple[str, ...] | None = setting(
        ENCODER.cameras,
        "the env's cameras actor and critics read (null: all of them; []: the state alone, e.g. DSRL's noise actor "
        "over a VLA base that reads the cameras itself)",
    )


@dataclass
class TanhGaussianHeadConfig:
    """A tanh-Gaussian MLP head's widths and log-std bounds."""

    hidden: tuple[int, ...] = setting(ACTOR_HIDDEN, "policy MLP widths", low=1)
    log_std_min: float = setting(-5.0, "lower bound of the policy's log std")
    log_std_max: float = setting(2.0, "upper bound of the policy's log std")


@dataclass
class GaussianPolicyConfig(TanhGaussianHeadConfig):
    """`policy=gaussian_mlp`: observation encoder + tanh-Gaussian MLP head (policies/gaussian.py)."""

    blocks: ClassVar[tuple[str, ...]] = ("encoder",)

    image_features: int | None = setting(None, "older configs' spelling of encoder.features (null: that)", low=1)


@dataclass
class HybridGripperPolicyConfig(GaussianPolicyConfig):
    """`policy=hybrid_gripper`: the tanh-Gaussian arm plus a discrete open/stay/close gripper critic."""

    gripper_hidden: tuple[int, ...] = setting(ACTOR_HIDDEN, "gripper critic MLP widths", low=1)
    gripper_heads: int = setting(2, "gripper critic ensemble size", low=1)
    epsilon: float = setting(0.1, "random gripper choice this often while training (not in evaluation)", low=0, high=1)


@dataclass
class BasePolicyConfig:
    """`policy.base`: the frozen base of a residual or DSRL policy, built by every process and never sent."""

    blocks: ClassVar[tuple[str, ...]] = ("model",)  # DSRL: the base `robo-rl train` clones when path is null

    kind: str = setting(
        "bc",
        "bc: a `robo-rl bc` checkpoint | lerobot: a pretrained_model folder or hub id (DSRL: a sampler taking noise) "
        "| remote: a `robo-rl policy serve` server, path tcp://<host>:<port>",
        choices=("bc", "lerobot", "remote"),
    )
    path: str | None = setting(None, "the base (null with `robo-rl train`: one is behaviour-cloned from the demos)")
    execute_steps: int | None = setting(
        None, "actions run from each base chunk (null: the checkpoint's, or all)", low=1
    )
    task: str | None = setting(
        None,
        "the task text of a language-conditioned base (lerobot, or a flow with a task embedding) where none is given",
    )
    noise_scale: float | None = setting(
        None,
        "residual: sample a flow/diffusion/SmolVLA base from initial noise of this std (0: its mode; null: its own)",
        low=0,
        high=4,
    )
    timeout_s: float = setting(
        2.0, "remote: the wait for each chunk; a late one fails the step (never reused)", above=0
    )
    curve_key: str | None = setting(
        None,
        "remote off loopback: this machine's <dir>/<name>.key_secret from `robo-rl keys generate` "
        "(<dir>/learner.key: the server's)",
    )


@dataclass
class ResidualPolicyConfig:
    """`policy=residual`: a frozen base plus a residual head s*tanh(MLP(features, base action)), zero at the start."""

    blocks: ClassVar[tuple[str, ...]] = ("base", "encoder")

    scale: float = setting(0.1, "the residual's bound s (ResFiT: 0.1, 0.2 on harder tasks)", above=0, high=2)
    hidden: tuple[int, ...] = setting(ACTOR_HIDDEN, "residual MLP widths", low=1)
    exploration_std: float = setting(0.05, "Gaussian noise on the residual while training (not in evaluation)", low=0)
    warmup_noise: float = setting(
        0.2, "train.random_steps act as base + uniform noise of this size (normalised units)", low=0, high=2
    )
    action_range: str = setting(
        "data",
        "data: the correction is normalised by the base's training action range widened by (1+s), as ResFiT does | "
        "full: by the task's [-1, 1]",
        choices=("data", "full"),
    )
    state_norm: str = setting("none", f"the residual and its critic: {STATE_NORM}", choices=STATE_NORMS)
    exploration_floor: float = setting(
        1.0,
        "< 1: while algo.bound_ramp_updates ramps the bound up, the noise's std is exploration_std * max(bound "
        "share, this), so early data stays near the base; 1: whole from the start",
        low=0,
        high=1,
    )
    action_history: int = setting(
        0,
        "the last k actions sent join the residual's and its critic's input (0: none): under a delay the arm still "
        "executes some of them, which the observation cannot show",
        low=0,
    )


@dataclass
class NoisePolicyConfig(TanhGaussianHeadConfig):
    """`policy=dsrl`: a frozen flow/diffusion base whose initial noise a tanh-Gaussian noise actor picks per chunk."""

    blocks: ClassVar[tuple[str, ...]] = ("base", "encoder")

    noise_bound: float = setting(1.5, "the noise actor's box [-b, b] per dimension (DSRL: 1.5)", above=0, high=5)
    warmup: str = setting(
        "base",
        "train.random_steps: base (w ~ N(0, I): the base's own behaviour) | uniform (over the box)",
        choices=("base", "uniform"),
    )
    execute_steps: int | None = setting(None, "actions run from each chunk; overrides base.execute_steps", low=1)
    state_norm: str = setting("none", f"the noise actor and its critics: {STATE_NORM}", choices=STATE_NORMS)


@dataclass
class GenerativeModelConfig:
    """`policy.model`, `policy.base.model`: the flow/diffusion policy `robo-rl train` behaviour-clones first when no
    path is given (policies/flow.py)."""

    kind: str = setting(
        "flow", "flow (rectified flow) | diffusion (DDPM training, DDIM sampling)", choices=GENERATIVE_KINDS
    )
    chunk_size: int = setting(4, "actions per sampled chunk", low=1, high=1000)
    execute_steps: int | None = setting(4, "actions run open-loop from each chunk (null: the whole chunk)", low=1)
    steps: int = setting(
        10, "integration steps K (flow) or DDIM steps (diffusion); pi0 and SmolVLA use 10", low=1, high=1000
    )
    hidden: tuple[int, ...] = setting((256, 256, 256), "the velocity/noise network's widths (LayerNorm MLP)", low=1)
    time_features: int = setting(32, "sinusoidal features of the flow time / diffusion timestep", low=2)
    diffusion_timesteps: int = setting(
        100, "diffusion only: DDPM training timesteps T (cosine schedule)", low=1, high=10000
    )
    task_embedding: int = setting(
        0,
        "width of a learned vector per instruction of the demonstrations (0: none; one model, several tasks)",
        low=0,
        high=1024,
    )


@dataclass
class GenerativePolicyConfig(GenerativeModelConfig):
    """`policy=flow|diffusion`: a trained flow/diffusion checkpoint acting in chunks, each from fresh noise; its
    architecture is what `robo-rl bc policy=flow|diffusion` trains."""

    blocks: ClassVar[tuple[str, ...]] = ("encoder",)

    execute_steps: int | None = setting(None, "actions run open-loop from each chunk (null: the whole chunk)", low=1)
    path: str | None = setting(None, "a `robo-rl bc policy=flow|diffusion` checkpoint (<run>/bc/policy.pt)")


@dataclass
class ChainPolicyConfig:
    """`policy=reinflow|dppo`: a trained flow/diffusion policy sampled as a Markov chain with an exact
    log-probability, its scored steps fine-tuned by PPO (algo=ppo; policies/chain.py)."""

    blocks: ClassVar[tuple[str, ...]] = ("model", "camera_map")  # camera_map: the VLA's camera name -> ours

    path: str | None = setting(
        None,
        "a `robo-rl bc` flow (reinflow) or diffusion (dppo) checkpoint to fine-tune, or a LeRobot SmolVLA folder or "
        "hub id (reinflow: only its flow action expert is fine-tuned); null with `robo-rl train`: cloned from model",
    )
    task: str | None = setting(None, "reinflow on a VLA: its instruction")
    method: str = setting("reinflow", "the chain: reinflow (flow) | dppo (diffusion)", choices=("reinflow", "dppo"))
    steps: int | None = setting(
        4,
        "flow (ReinFlow: 1-4) or DDIM (DPPO: 20) steps K while fine-tuning (null: the checkpoint's)",
        low=1,
        high=1000,
    )
    stochastic_steps: int | None = setting(
        None, "dppo: the last K' steps, stochastic and fine-tuned (null: all K)", low=1, high=1000
    )
    sigma_min: float = setting(
        0.05, "the smallest std of a scored step (ReinFlow: 0.05; DPPO: >= 0.1)", above=0, high=1
    )
    sigma_max: float = setting(0.12, "the largest std of a scored step (ReinFlow, manipulation: 0.12)", above=0, high=1)
    sigma_max_first: float | None = setting(
        None,
        "reinflow: the first step's upper bound where it differs, noise there switches modes (null: sigma_max)",
        above=0,
        high=1,
    )
    noise_hidden: tuple[int, ...] = setting((64, 64), "the noise network's widths", low=1)
    initial_noise: str = setting(
        "prior",
        "reinflow: x_0 ~ N(0, I) (prior) | learned: N(mu(s), sigma(s)^2), mu in [-1, 1], starting at the prior and "
        "scored with the steps, so PPO also picks which noise the chain starts from",
        choices=("prior", "learned"),
    )
    initial_sigma_min: float = setting(0.3, "initial_noise=learned: the smallest std of x_0", above=0, high=1)
    execute_steps: int | None = setting(
        None, "actions run from each chunk (null: the checkpoint's, else the whole chunk)", low=1
    )


BLOCKS: dict[str, dict[str | None, type]] = {
    "policy": {
        "policies.gaussian.TanhGaussianPolicy": GaussianPolicyConfig,
        "policies.hybrid.HybridGripperPolicy": HybridGripperPolicyConfig,
        "policies.residual.ResidualPolicy": ResidualPolicyConfig,
        "policies.dsrl.NoisePolicy": NoisePolicyConfig,
        "policies.flow.GenerativePolicy": GenerativePolicyConfig,
        "policies.chain.ChainPolicy": ChainPolicyConfig,
        "policies.parl.RankedChunkPolicy": ParlPolicyConfig,
    },
    "policy.encoder": {FIXED: PolicyEncoderConfig},
    "policy.base": {FIXED: BasePolicyConfig},
    "policy.model": {FIXED: GenerativeModelConfig},
    "policy.base.model": {FIXED: GenerativeModelConfig},
}
