"""Baseline of `bench/learner.py`: LeRobot 0.6.1's SAC learner step (`GaussianActorPolicy` + `SACAlgorithm`), built
as `lerobot/rl/learner.py` `add_actor_information_and_train` builds it and stepped as its main loop steps it.

Construction, mirrored line by line (learner.py unless named):
  policy = make_policy(cfg=cfg.policy, env_cfg=cfg.env)  -> factory.make_policy sets cfg.output_features/
      input_features from the features, then `GaussianActorPolicy(config=cfg)`, `policy.to(cfg.device)`; here the
      features are set on the config directly (what a HIL-SERL json config does) and the policy built the same way
  policy.train()
  algorithm = make_algorithm(cfg=cfg.algorithm, policy=policy)  -> train_rl.validate made cfg.algorithm with
      `make_algorithm_config("sac")` (SACAlgorithmConfig defaults) and set its policy_config = cfg.policy
  preprocessor, _ = make_pre_post_processors(policy_cfg=cfg.policy, dataset_stats=cfg.policy.dataset_stats)
  trainer = RLTrainer(algorithm=..., data_mixer=..., batch_size=cfg.batch_size, preprocessor=preprocessor)
      -> its __init__ calls algorithm.make_optimizers_and_scheduler(): Adam(actor, 3e-4) over the actor minus the
      shared encoder, Adam(critic_ensemble incl. the shared encoder, 3e-4), Adam([log_alpha], 3e-4)
  stats = trainer.training_step()  -> one "update" = algorithm.update(iterator), timed here.

One update with the defaults (utd_ratio=1, policy_update_freq=1, num_discrete_actions=None): the `utd_ratio - 1`
critic-only loop runs zero times; one batch is pulled (its preprocessor normalises state and next_state on the
training thread, inside next()); get_observation_features caches image features only when vision_encoder_name is
set and the encoder frozen; one critic step (no-grad actor + target critics on next_state, online critics on state,
clip 40, Adam); `_optimization_step % 1 == 0`, so every step one actor step and one temperature step (each its own
actor forward); then the Polyak update (tau 0.005) of the target heads. Five `.item()` syncs per step.

The data mixer is a stand-in handing out a few prebuilt batches (the sampling and DrQ cost of `bench/replay.py` is
excluded), in the format `ReplayBuffer.sample` returns: state/next_state dicts, action (B, A), reward, done and
truncated as float (B,), complementary_info {discrete_penalty, is_intervention} float (B,); images float in [0, 1].
Normalisation stats (the learner passes cfg.policy.dataset_stats, which a HIL-SERL config writes per key): images
ImageNet mean/std (the config's default values, per camera key), state and action MIN_MAX over [-1, 1] (identity).
With cameras, most of an update's CPU time here is the kernel faulting in fresh pages: glibc hands every >32 MB
activation (conv1 of 512 images: 244 MB) back to the OS when freed (~2M minor faults per update with the default
encoder). Under jemalloc with decay off the same update takes ~1/3 of the CPU time; nothing here changes the allocator.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import time
from types import SimpleNamespace
from unittest import mock

import torch
from _lerobot_baseline import lerobot_rl_module
from torch import nn

RESNET10_HUB_NAME = "helper2424/resnet10"  # what LeRobot's HIL-SERL guide sets (the config comment: lerobot/resnet10)


def _gn(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(4, c)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            _gn(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            _gn(cout),
        )
        self.shortcut = (
            nn.Identity() if cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _gn(cout))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class _ResNet10(nn.Module):
    """The architecture of the hub's `helper2424/resnet10` (HIL-SERL's JAX ResNetV1-10 port, remote code), random
    weights: 7x7/2 conv + GroupNorm(4) + ReLU, 3x3/2 max-pool padded right/bottom (JAX "SAME"; zero pad equals -inf
    after ReLU), one basic block per stage 64-128-256-512; `last_hidden_state` is (B, 512, H/32, W/32)."""

    def __init__(self, sizes=(64, 128, 256, 512)) -> None:
        super().__init__()
        self.config = SimpleNamespace(hidden_sizes=list(sizes))  # what PretrainedImageEncoder reads
        self.embedder = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), _gn(64), nn.ReLU(), nn.ZeroPad2d((0, 1, 0, 1)), nn.MaxPool2d(3, 2)
        )
        ins = (64, *sizes[:-1])
        self.stages = nn.Sequential(*(_BasicBlock(ins[i], sizes[i], 1 if i == 0 else 2) for i in range(len(sizes))))

    def forward(self, x: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(last_hidden_state=self.stages(self.embedder(x)))


class _PrebuiltBatches:
    """Stands in for the learner's OnlineOfflineMixer: RLTrainer asks it for `get_iterator(batch_size, ...)`."""

    def __init__(self, batches: list[dict], device: str = "cpu") -> None:
        self.batches, self.device = batches, torch.device(device)

    def get_iterator(self, batch_size: int, async_prefetch: bool = True, queue_size: int = 2):
        for batch in itertools.cycle(self.batches):
            # preprocess_rl_batch rebinds state/next_state in the dict it is handed; on a GPU each batch is copied
            # there, as its ReplayBuffer.sample does (`.to(self.device)` of every field, from CPU storage)
            yield {**batch} if self.device.type == "cpu" else _to(batch, self.device)


def _to(tree, device: torch.device):
    return {k: _to(v, device) for k, v in tree.items()} if isinstance(tree, dict) else tree.to(device)


def _batches(
    n: int, batch_size: int, state_dim: int, action_dim: int, image_keys: list[str], image_hw, gen: torch.Generator
) -> list[dict]:
    def obs() -> dict[str, torch.Tensor]:
        images = {k: torch.rand(batch_size, 3, *image_hw, generator=gen) for k in image_keys}
        return {**images, "observation.state": torch.randn(batch_size, state_dim, generator=gen)}

    def flags(p: float) -> torch.Tensor:
        return (torch.rand(batch_size, generator=gen) < p).float()

    return [
        {
            "state": obs(),
            "action": torch.rand(batch_size, action_dim, generator=gen) * 2 - 1,
            "reward": flags(0.1),
            "next_state": obs(),
            "done": flags(0.02),
            "truncated": torch.zeros(batch_size),
            "complementary_info": {"discrete_penalty": torch.zeros(batch_size), "is_intervention": flags(0.1)},
        }
        for _ in range(n)
    ]


def _count(params) -> int:
    return sum(p.numel() for p in params)


def lerobot_sac_figures(
    state_dim: int = 18,
    action_dim: int = 4,
    cameras: int = 0,
    image_hw=(128, 128),
    hidden: tuple = (256, 256),
    num_critics: int = 2,
    batch_size: int = 256,
    vision_encoder: str | None = None,
    seconds: float = 20.0,
    seed: int = 0,
    bf16_autocast: bool = False,
    warmup: tuple[int, float] = (2, 3.0),
    device: str = "cpu",
) -> dict:
    """Updates/s of LeRobot's SAC learner step on `device` (its config's `device`: the policy there, batches moved
    there by its pre-processor's device step), one torch thread. `vision_encoder`: None for the config's
    default (`vision_encoder_name=None`: its 4-conv DefaultImageEncoder, no hub weights), or "resnet10-random".
    `bf16_autocast`: run its step inside `torch.autocast("cpu", bfloat16)` (LeRobot's learner does not do this;
    a reference for our mixed precision). `warmup`: at least this many updates and seconds before measuring."""
    if vision_encoder not in (None, "resnet10-random"):
        raise ValueError(f"offline only: vision_encoder None or 'resnet10-random', not {vision_encoder!r}")
    torch.set_num_threads(1)  # the learner on this 2-core box runs one intra-op thread, as ours does
    torch.manual_seed(seed)
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies import make_pre_post_processors
    from lerobot.policies.gaussian_actor import GaussianActorConfig, GaussianActorPolicy
    from lerobot.policies.gaussian_actor.configuration_gaussian_actor import ActorNetworkConfig, CriticNetworkConfig

    algorithms, trainer_mod = lerobot_rl_module("algorithms.factory"), lerobot_rl_module("trainer")
    image_keys = [f"observation.images.cam{i}" for i in range(cameras)]
    input_features = {k: PolicyFeature(type=FeatureType.VISUAL, shape=(3, *image_hw)) for k in image_keys}
    input_features["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(state_dim,))
    imagenet = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    stats = {k: imagenet for k in image_keys} | {
        "observation.state": {"min": [-1.0] * state_dim, "max": [1.0] * state_dim},
        "action": {"min": [-1.0] * action_dim, "max": [1.0] * action_dim},
    }
    policy_kwargs = dict(
        device=device,
        input_features=input_features,
        dataset_stats=stats,
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
        actor_network_kwargs=ActorNetworkConfig(hidden_dims=list(hidden)),
    )
    if vision_encoder == "resnet10-random":
        policy_kwargs["vision_encoder_name"] = RESNET10_HUB_NAME
    policy_cfg = GaussianActorConfig(**policy_kwargs)
    patch = mock.patch("transformers.AutoModel.from_pretrained", lambda *a, **k: _ResNet10())  # no hub call
    with patch if vision_encoder else contextlib.nullcontext():
        policy = GaussianActorPolicy(config=policy_cfg)  # factory.make_policy: policy_cls(**kwargs)
    policy.to(policy_cfg.device)
    policy.train()
    algo_kwargs = dict(num_critics=num_critics, critic_network_kwargs=CriticNetworkConfig(hidden_dims=list(hidden)))
    algo_cfg = algorithms.make_algorithm_config("sac", **algo_kwargs)
    algo_cfg.policy_config = policy_cfg  # TrainRLServerPipelineConfig.validate
    algorithm = algorithms.make_algorithm(cfg=algo_cfg, policy=policy)
    preprocessor, _ = make_pre_post_processors(policy_cfg=policy_cfg, dataset_stats=policy_cfg.dataset_stats)
    batches = _batches(
        2 if cameras else 4,
        batch_size,
        state_dim,
        action_dim,
        image_keys,
        image_hw,
        torch.Generator().manual_seed(seed),
    )
    mixer = _PrebuiltBatches(batches, device)
    trainer = trainer_mod.RLTrainer(
        algorithm=algorithm, data_mixer=mixer, batch_size=batch_size, preprocessor=preprocessor
    )
    algorithm.optimization_step = 0

    cpu = []  # CPU seconds (user + sys) per update: robust to other work on the shared box, unlike wall time

    def step() -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16_autocast):
            trainer.training_step()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        cpu.append(time.process_time() - c0)
        return time.perf_counter() - t0

    min_updates, warm_s = warmup  # (2, 3.0) by default: for image configs 2 updates already take longer than 3 s
    t0, warm = time.perf_counter(), 0
    while True:
        step()
        warm += 1
        if warm >= min_updates and time.perf_counter() - t0 >= warm_s:
            break
    times, t0, cpu = [], time.perf_counter(), []
    while not times or time.perf_counter() - t0 < seconds:
        times.append(step())
    elapsed = time.perf_counter() - t0
    pre = []  # the preprocessor's share of an update, for scale (it is inside the timed step)
    for b in batches * 2:
        t1 = time.perf_counter()
        trainer_mod.preprocess_rl_batch(preprocessor, {**b})
        pre.append(time.perf_counter() - t1)

    enc = policy.encoder_critic
    image_enc = getattr(enc, "image_encoder", None)
    return {
        "updates_per_s": len(times) / elapsed,
        "updates_per_s_median": 1 / statistics.median(times),
        "ms_per_update_median": statistics.median(times) * 1e3,
        "updates_per_cpu_s_median": 1 / statistics.median(cpu),
        "preprocess_ms_median": statistics.median(pre) * 1e3,
        "seconds": elapsed,
        "updates": len(times),
        "warmup_updates": warm,
        "load_average": list(os.getloadavg()),
        "params": {
            "actor": _count(policy.get_optim_params()["actor"]),  # what the actor optimizer steps
            "critic": _count(algorithm.critic_ensemble.critics.parameters()),  # all heads, targets not counted
            "encoder": _count(enc.parameters()),  # shared by actor and critics; stepped by the critic optimizer
            "encoder_trainable": _count(p for p in enc.parameters() if p.requires_grad),
            "image_encoder_frozen": _count(image_enc.parameters()) if image_enc is not None else 0,
        },
        "config": {
            "policy": f"GaussianActorPolicy(config=GaussianActorConfig(device={device!r}, input_features=..., "
            f"output_features=..., dataset_stats=..., actor_network_kwargs=ActorNetworkConfig("
            f"hidden_dims={list(hidden)})"
            + (f", vision_encoder_name={RESNET10_HUB_NAME!r}" if vision_encoder else "")
            + "))",
            "policy_mirrors": "learner.py: policy = make_policy(cfg=cfg.policy, env_cfg=cfg.env); policy.train()",
            "algorithm": f"make_algorithm_config('sac', num_critics={num_critics}, critic_network_kwargs="
            f"CriticNetworkConfig(hidden_dims={list(hidden)})); policy_config = policy config",
            "algorithm_mirrors": "train_rl.py validate: make_algorithm_config('sac'); learner.py: algorithm = "
            "make_algorithm(cfg=cfg.algorithm, policy=policy)",
            "trainer_mirrors": "learner.py: make_pre_post_processors(policy_cfg=cfg.policy, dataset_stats=...); "
            "RLTrainer(algorithm, data_mixer, batch_size, preprocessor); trainer.training_step()",
            "update": f"utd_ratio={algo_cfg.utd_ratio}, policy_update_freq={algo_cfg.policy_update_freq}: 1 critic "
            "+ 1 actor + 1 temperature Adam step, then Polyak (tau "
            f"{algo_cfg.critic_target_update_weight}) per update",
            "image_encoder": (type(image_enc.image_enc_layers).__name__ if vision_encoder else type(image_enc).__name__)
            if image_enc is not None
            else None,
            "vision_encoder_name": policy_cfg.vision_encoder_name,
            "default_encoder_needs_hub": False,  # GaussianActorConfig.vision_encoder_name defaults to None
            "freeze_vision_encoder": policy_cfg.freeze_vision_encoder,
            "image_features_cached": bool(cameras and policy_cfg.vision_encoder_name is not None),
            "shared_encoder": policy_cfg.shared_encoder,
            "latent_dim": policy_cfg.latent_dim,
            "critic_hidden": list(algo_cfg.critic_network_kwargs.hidden_dims),
            "actor_hidden": list(policy_cfg.actor_network_kwargs.hidden_dims),
            "num_critics": algo_cfg.num_critics,
            "state_dim": state_dim,
            "action_dim": action_dim,
            "cameras": cameras,
            "image_hw": list(image_hw),
            "batch_size": batch_size,
            "prebuilt_batches": len(batches),
            "seed": seed,
            "torch_threads": torch.get_num_threads(),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s per config (default 20 s)")
    args = parser.parse_args()
    secs = 5.0 if args.quick else 20.0
    for kwargs in ({}, {"cameras": 2}, {"cameras": 2, "vision_encoder": "resnet10-random"}):
        print(json.dumps({"run": kwargs, **lerobot_sac_figures(seconds=secs, **kwargs)}), flush=True)
