"""VLAs as DSRL bases (issue 16): K-step against one-step chunk latency and the DSRL actor step, per decision.

SmolVLA, π0 and π0.5 from lerobot at their real sizes with random weights (nothing is downloaded; the question is
time and memory, not behaviour):

  smolvla   SmolVLA's defaults (16 of the backbone's 32 layers, an action expert 0.75 as wide, chunk 50, 10 flow
            steps, images resized to 512) on a SmolVLM2-500M-sized backbone: a local folder with its config at the
            real dimensions (policies/smolvlm_backbone.py writes it, with a tiny tokenizer), `load_vlm_weights=False`
  pi0/pi05  lerobot's PI0Config / PI05Config defaults: PaliGemma (SigLIP-So400m + Gemma 2B) with a Gemma-300M
            action expert, chunk 50, 10 flow steps, images resized to 224
  task      SO-101-like: a state of 6, two cameras of 480x640, actions of 6
  batch     what the pre-processor would hand the policy (the PaliGemma tokenizer cannot be downloaded, so none runs):
            normalised state, float images in [0, 1] at camera resolution (the policy resizes them in the call),
            language token ids and attention mask padded as lerobot pads them (SmolVLA to the prompt, 16 tokens;
            π0 to 48; π0.5 to 200, the state in the prompt)
  K-step    `predict_action_chunk(batch, noise=z)`, z of (1, chunk, max_action_dim): the DSRL actor's call
  one-step  the same model and weights with its step count set to 1 for the call: what a distilled one-step
            expert runs (the VLM prefix pass is paid once either way: the ratio is the expert's share)
  DSRL step one actor decision: the noise actor of policies/dsrl.py (a tanh-Gaussian MLP, hidden (256, 256), on the
            state, on the CPU as the actor runs it) draws z, the batch and z go to the device, the chunk comes back
            to the CPU; it fits when its p99 is within the control period (10 Hz: 100 ms)
  memory    parameters by dtype (all of the module's; those of the language-model heads, which no chunk uses,
            apart too); on CUDA the weights' memory and the peak (torch.cuda.max_memory_allocated)

Calls interleave (K-step, one-step, the two DSRL steps) after warm-up, CUDA synchronised around each. --dtype
bfloat16 (the CUDA default) is what lerobot runs: π0/π0.5 with config.dtype="bfloat16" (vision tower and norms stay
float32), SmolVLA's VLM in bfloat16 as `load_vlm_weights=True` loads it (its expert and projections stay float32).

    python bench/vla.py --device cuda                 # the three at real size, 100 calls each
    python bench/vla.py --models smolvla --calls 2    # real SmolVLA on the CPU (real sizes on a CPU: name --models)
    python bench/vla.py --quick                       # tiny configurations of the same architectures: <= 60 s on CPU
    python bench/vla.py --device cuda --profile 3 --reinflow 64   # also where a chunk's time goes (torch.profiler),
                                                      # and ReinFlow on SmolVLA's action expert loaded by path:
                                                      # acting, one PPO epoch, peak memory
    python bench/vla.py --device cuda --compile reduce-overhead   # lerobot's compile_model

The last line is one JSON object, also written to bench/results/vla.json (bench/results/quick/ with --quick), with "the
largest VLA whose DSRL actor step fits the control period" among those measured, for the K-step and one-step base.
A model that fails records {"error": ...} and the others go on.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import cpu_model, write_result  # noqa: E402
from policies.smolvlm_backbone import write_smolvlm  # noqa: E402

MODELS = ("smolvla", "pi0", "pi05")
STATE_DIM, ACTION_DIM, CAMERAS, CAMERA_HW, QUICK_CAMERA_HW = 6, 6, ("front", "wrist"), (480, 640), (48, 64)
# language tokens (sequence length, real tokens): SmolVLA pads to the longest prompt, π0/π0.5 to tokenizer_max_length
TOKENS = {"smolvla": (16, 16), "pi0": (48, 16), "pi05": (200, 40)}
STEPS_FIELD = {"smolvla": "num_steps", "pi0": "num_inference_steps", "pi05": "num_inference_steps"}
NOISE_BOUND = 1.5  # policies/dsrl.py's default box of the noise


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - start) * 1e3


def percentiles(ms: list[float]) -> dict:
    p50, p99 = np.percentile(np.asarray(ms), [50, 99])
    return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3), "n": len(ms)}


def features(quick: bool) -> dict:
    """The task's input and output features: a state, the cameras (channels first), the action."""
    from lerobot.configs.types import FeatureType, PolicyFeature

    image = PolicyFeature(FeatureType.VISUAL, (3, *(QUICK_CAMERA_HW if quick else CAMERA_HW)))
    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (STATE_DIM,))}
    inputs.update({f"observation.images.{camera}": image for camera in CAMERAS})
    return {"input_features": inputs, "output_features": {"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))}}


def compiled(mode: str | None) -> dict:
    """lerobot's own switch: `compile_model` wraps the policy's `sample_actions` in torch.compile(mode=...)."""
    return dict(compile_model=True, compile_mode=mode) if mode else {}


def build_smolvla(quick: bool, device: str, dtype: str, work: Path, compile_mode: str | None = None):
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    # the architecture alone (random init), as robo-rl vla train's vlm=tiny / vlm=smolvlm2_500m writes it
    vlm = write_smolvlm(work / ("smolvlm_tiny" if quick else "smolvlm2_500m"), "tiny" if quick else "smolvlm2_500m")
    cfg = SmolVLAConfig(
        **features(quick),
        vlm_model_name=str(vlm),
        load_vlm_weights=False,
        device=device,
        push_to_hub=False,
        **(dict(resize_imgs_with_padding=(32, 32)) if quick else {}),
        **compiled(compile_mode),
    )
    with torch.device(device):
        policy = SmolVLAPolicy(cfg)
    if dtype == "bfloat16":  # as load_vlm_weights=True loads the VLM; the expert and projections stay float32
        policy.model.vlm_with_expert.vlm.to(torch.bfloat16)
    return policy.to(device).eval()


@contextlib.contextmanager
def tiny_gemma(module):
    """`module` (modeling_pi0 or modeling_pi05) builds a tiny PaliGemma and expert: its get_gemma_config knows only
    the real sizes, and PaliGemmaWithExpertModel fixes a SigLIP-So400m projected to 2048. Eight heads: lerobot's
    joint attention reshapes to 8 heads."""
    get_config, paligemma = module.get_gemma_config, module.PaliGemmaForConditionalGenerationWithPiGemma
    widths = {"gemma_2b": 64, "gemma_300m": 32}

    def small_config(variant: str):
        return module.GemmaConfig(
            width=widths[variant], depth=2, mlp_dim=2 * widths[variant], num_heads=8, num_kv_heads=1, head_dim=8
        )

    def small_paligemma(config):
        sizes = dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            projection_dim=config.text_config.hidden_size,
        )
        for name, value in sizes.items():
            setattr(config.vision_config, name, value)
        return paligemma(config=config)

    module.get_gemma_config, module.PaliGemmaForConditionalGenerationWithPiGemma = small_config, small_paligemma
    try:
        yield
    finally:
        module.get_gemma_config, module.PaliGemmaForConditionalGenerationWithPiGemma = get_config, paligemma


def build_pi(kind: str, quick: bool, device: str, dtype: str, compile_mode: str | None = None):
    if kind == "pi0":
        from lerobot.policies.pi0 import modeling_pi0 as module
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
    else:
        from lerobot.policies.pi05 import modeling_pi05 as module
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config

    cfg = Config(
        **features(quick),
        dtype=dtype,
        device=device,
        push_to_hub=False,
        **(dict(image_resolution=(28, 28)) if quick else {}),
        **compiled(compile_mode),
    )
    policy_class = module.PI0Policy if kind == "pi0" else module.PI05Policy
    with tiny_gemma(module) if quick else contextlib.nullcontext(), torch.device(device):
        policy = policy_class(cfg)
    return policy.to(device).eval()


def observation_batch(kind: str, quick: bool, seed: int = 0) -> dict:
    """On the CPU, as the pre-processor leaves it before its device step."""
    gen = torch.Generator().manual_seed(seed)
    length, real = TOKENS[kind]
    mask = torch.zeros(1, length, dtype=torch.bool)
    mask[:, :real] = True
    tokens = torch.randint(1, 256, (1, length), generator=gen) * mask  # ids every tokenizer here has; 0 pads
    batch = {
        "observation.state": torch.randn(1, STATE_DIM, generator=gen),
        "observation.language.tokens": tokens,
        "observation.language.attention_mask": mask,
    }
    for camera in CAMERAS:
        batch[f"observation.images.{camera}"] = torch.rand(
            1, 3, *(QUICK_CAMERA_HW if quick else CAMERA_HW), generator=gen
        )
    return batch


def noise_actor(noise_dim: int):
    """DSRL's noise actor (policies/dsrl.py): a tanh-Gaussian MLP on the state, its sample scaled to the box."""
    from policies.gaussian import TanhGaussianPolicy
    from robo_rl.envs import make_observation_space

    actor = TanhGaussianPolicy(make_observation_space(STATE_DIM, {}), noise_dim).eval()

    @torch.no_grad()
    def draw(state: torch.Tensor) -> torch.Tensor:
        return NOISE_BOUND * actor.sample(actor.encoder({"state": state, "images": {}}))[0]

    return draw


def measure(policy, kind: str, quick: bool, device: str, calls: int, warmup: int, period_ms: float) -> dict:
    cfg, field = policy.config, STEPS_FIELD[kind]
    steps = getattr(cfg, field)
    shape = (1, cfg.chunk_size, cfg.max_action_dim)
    draw = noise_actor(cfg.chunk_size * cfg.max_action_dim)
    host = observation_batch(kind, quick)
    on_device = {k: v.to(device) for k, v in host.items()}
    gen = torch.Generator().manual_seed(1)

    def chunk(k: int, batch: dict, z: torch.Tensor | None = None) -> torch.Tensor:
        setattr(cfg, field, k)
        policy.reset()
        z = torch.randn(shape, generator=gen).to(device) if z is None else z
        return policy.predict_action_chunk(batch, noise=z)

    def dsrl_step(k: int) -> torch.Tensor:
        z = draw(host["observation.state"]).reshape(shape)
        return chunk(k, {key: v.to(device) for key, v in host.items()}, z.to(device)).cpu()

    runs = {
        "k_step": lambda: chunk(steps, on_device),
        "one_step": lambda: chunk(1, on_device),
        "dsrl_step": lambda: dsrl_step(steps),
        "dsrl_step_one_step": lambda: dsrl_step(1),
        "noise_actor": lambda: draw(host["observation.state"]),
    }
    times = {name: [] for name in runs}
    try:
        first = chunk(steps, on_device)
        for i in range(warmup + calls):
            for name, fn in runs.items():
                ms = timed(fn, device)
                if i >= warmup:
                    times[name].append(ms)
    finally:
        setattr(cfg, field, steps)
    r = {name: percentiles(t) for name, t in times.items()}
    r["speedup_p50"] = round(r["k_step"]["p50_ms"] / r["one_step"]["p50_ms"], 2)
    r["speedup_p99"] = round(r["k_step"]["p99_ms"] / r["one_step"]["p99_ms"], 2)
    for name in ("dsrl_step", "dsrl_step_one_step"):
        r[name]["fits"] = r[name]["p99_ms"] <= period_ms
    return {
        "steps": steps,
        "chunk": cfg.chunk_size,
        "max_action_dim": cfg.max_action_dim,
        "lang_tokens": TOKENS[kind][0],
        "chunk_shape": list(first.shape),
        "finite": bool(torch.isfinite(first).all()),
        **r,
    }


def one_model(kind: str, args, work: Path) -> dict:
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    start = time.perf_counter()
    policy = (
        build_smolvla(args.quick, args.device, args.dtype, work, args.compile)
        if kind == "smolvla"
        else build_pi(kind, args.quick, args.device, args.dtype, args.compile)
    )
    sync(args.device)
    by_dtype: dict[str, int] = {}
    for p in policy.parameters():
        name = str(p.dtype).removeprefix("torch.")
        by_dtype[name] = by_dtype.get(name, 0) + p.numel()
    unused = sum(p.numel() for name, p in policy.named_parameters() if "lm_head" in name)  # no text is generated
    r = {
        "size": "tiny" if args.quick else "real",
        "dtype": args.dtype,
        "params": sum(by_dtype.values()),
        "params_by_dtype": by_dtype,
        "lm_head_params": unused,
        "build_s": round(time.perf_counter() - start, 1),
    }
    print(
        f"{kind}: built in {r['build_s']} s, {r['params'] / 1e6:.1f}M parameters "
        f"({', '.join(f'{n / 1e6:.1f}M {d}' for d, n in by_dtype.items())}; {unused / 1e6:.1f}M of them in "
        f"language-model heads that no chunk uses)",
        flush=True,
    )
    if cuda:
        r["gpu_weights_gb"] = round(torch.cuda.memory_allocated() / 2**30, 3)
        torch.cuda.reset_peak_memory_stats()
    r.update(measure(policy, kind, args.quick, args.device, args.calls, args.warmup, 1e3 / args.control_hz))
    if cuda:
        r["gpu_peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    if args.profile:
        r["profile"] = profile_chunk(policy, kind, args.quick, args.device, args.profile)
    return r


def reinflow_smolvla(args, work: Path, decisions: int, minibatch: int) -> dict:
    """ReinFlow on SmolVLA's action expert (policy=reinflow policy.path=<SmolVLA folder>) at this run's size (real
    or --quick), random weights saved as a `pretrained_model` folder and loaded by path as a user's is; the VLM in
    `args.dtype` as measure()'s model. Per decision: acting (`act_with_extras` on one observation: the prefix pass and
    the K noisy Euler steps with their log-probabilities); then one PPO update (`algo.update`, one epoch of
    `decisions` decisions in minibatches of `minibatch`: the chain's log-probability re-scored with gradients through
    the action expert, the value, the optimiser steps); the weights an actor is sent; peak GPU memory."""
    from lerobot.policies.factory import make_pre_post_processors

    from policies.chain import ChainPolicy
    from robo_rl.algos.base import trainable_state
    from robo_rl.algos.ppo import build_ppo
    from robo_rl.envs import make_observation_space
    from robo_rl.policy_io import batch_to_torch, stack_obs

    cuda = args.device.startswith("cuda")
    folder = work / "smolvla_pretrained_model"
    policy = build_smolvla(args.quick, "cpu", "float32", work)  # saved in float32, as `lerobot-train` saves
    stats = {
        "observation.state": {"mean": torch.zeros(STATE_DIM), "std": torch.ones(STATE_DIM)},
        "action": {"mean": torch.zeros(ACTION_DIM), "std": torch.ones(ACTION_DIM)},
    }
    for part in (policy, *make_pre_post_processors(policy.config, dataset_stats=stats)):
        part.save_pretrained(folder)
    steps = policy.config.num_steps
    del policy
    gc.collect()
    hw = QUICK_CAMERA_HW if args.quick else CAMERA_HW
    space = make_observation_space(STATE_DIM, {camera: hw for camera in CAMERAS})
    torch.manual_seed(0)
    start = time.perf_counter()
    chain = ChainPolicy(space, ACTION_DIM, path=str(folder), method="reinflow", steps=steps, task="pick the cube")
    if args.dtype == "bfloat16":
        chain.model.vla.model.vlm_with_expert.vlm.to(torch.bfloat16)
    chain.to(args.device)
    algo = build_ppo(chain, space, ACTION_DIM, rollout_env_steps=decisions, batch_size=minibatch, epochs=1)
    load_s = time.perf_counter() - start
    trainable = sum(p.numel() for p in chain.parameters() if p.requires_grad)
    rng = np.random.default_rng(0)
    device = torch.device(args.device)

    def observation() -> dict:  # a contract observation (numpy), as an env returns it
        return {
            "state": rng.standard_normal(STATE_DIM).astype(np.float32),
            "images": {c: rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for c in CAMERAS},
        }

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    acting, observations, extras = [], [], []
    for i in range(decisions + 2):
        obs = observation()
        chain.reset()
        sync(args.device)
        t = time.perf_counter()
        _, decided = chain.act_with_extras(batch_to_torch(stack_obs([obs]), device))  # as an actor on the GPU acts
        decided = {k: v.cpu().numpy() for k, v in decided.items()}
        sync(args.device)
        if i >= 2:  # two warm-up decisions
            acting.append((time.perf_counter() - t) * 1e3)
            observations.append(obs)
            extras.append(decided)
    n = len(observations)
    obs = stack_obs(observations)  # CPU tensors sharing the numpy arrays, which batch_to_torch takes as they are
    batch = batch_to_torch(
        {
            "obs": obs,
            "next_obs": obs,
            "reward": rng.standard_normal(n).astype(np.float32),
            "discount": np.zeros(n, np.float32),
            "steps": np.full(n, int(chain.execute_steps)),
            "continues": np.zeros(n, bool),
            "extras": {k: np.concatenate([e[k] for e in extras]) for k in ("chain", "log_prob")},
        },
        device,
    )  # as the learner hands a rollout to the algorithm
    updates = []
    for _ in range(3):
        sync(args.device)
        t = time.perf_counter()
        metrics = algo.update([batch])
        sync(args.device)
        updates.append(time.perf_counter() - t)
    t = time.perf_counter()
    sent = trainable_state(chain)
    sent_s = time.perf_counter() - t
    r = {
        "steps": steps,
        "decisions": n,
        "minibatch": minibatch,
        "load_s": round(load_s, 1),
        "trainable_params": trainable,
        "sent_params": sum(v.numel() for v in sent.values()),
        "act_per_decision": percentiles(acting),
        "update_s": [round(u, 3) for u in updates],
        "update_ms_per_decision": round(1e3 * float(np.median(updates)) / n, 2),
        "sent_state_s": round(sent_s, 3),
        "policy_loss": float(metrics["policy_loss"]),
        "approx_kl": float(metrics["approx_kl"]),
    }
    if cuda:
        r["gpu_peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    del chain, algo, batch
    return r


def profile_chunk(policy, kind: str, quick: bool, device: str, calls: int, top: int = 12) -> dict:
    """Where a K-step chunk's time goes (torch.profiler over `calls` calls after one untimed): the host's time and
    the device's per call, kernel launches per call, and the operators that take most of each (self time per call,
    calls per chunk). Host time near the wall time with the device's far under it: the call waits on launching
    kernels, not on arithmetic."""
    from torch.profiler import ProfilerActivity, profile

    batch = {k: v.to(device) for k, v in observation_batch(kind, quick).items()}
    shape = (1, policy.config.chunk_size, policy.config.max_action_dim)
    z = torch.randn(shape).to(device)

    def chunk() -> None:
        policy.reset()
        policy.predict_action_chunk(batch, noise=z)
        sync(device)

    chunk()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    wall = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(calls):
            chunk()
    wall = (time.perf_counter() - wall) * 1e3 / calls
    events = prof.key_averages()
    device_time = [(e.key, getattr(e, "self_device_time_total", 0.0), e.count) for e in events]
    kernels = sum(e.count for e in prof.events() if e.device_type.name == "CUDA")

    def rows(items) -> list:
        items = sorted(items, key=lambda x: -x[1])[:top]
        return [[name, round(us / 1e3 / calls, 3), round(count / calls, 1)] for name, us, count in items]

    return {
        "calls": calls,
        "wall_ms_per_call": round(wall, 2),
        "device_ms_per_call": round(sum(t for _, t, _ in device_time) / 1e3 / calls, 2),
        "kernels_per_call": round(kernels / calls, 1),
        "top_host_self_ms": rows([(e.key, e.self_cpu_time_total, e.count) for e in events]),
        "top_device_self_ms": rows(device_time) if device.startswith("cuda") else [],
    }


def report(kind: str, r: dict, period_ms: float) -> None:
    def fig(t: dict) -> str:
        return f"p50 {t['p50_ms']:.2f} ms p99 {t['p99_ms']:.2f} ms"

    k = r["steps"]
    print(f"{kind} K={k} chunk: {fig(r['k_step'])}", flush=True)
    print(
        f"{kind} K=1 chunk: {fig(r['one_step'])} (K={k} / K=1: p50 {r['speedup_p50']:.2f}x, "
        f"p99 {r['speedup_p99']:.2f}x)",
        flush=True,
    )
    print(f"{kind} noise actor: {fig(r['noise_actor'])}", flush=True)
    for name, steps in (("dsrl_step", k), ("dsrl_step_one_step", 1)):
        verdict = "fits" if r[name]["fits"] else "exceeds"
        print(
            f"{kind} DSRL actor step (K={steps}): {fig(r[name])}: {verdict} the {period_ms:.0f} ms period", flush=True
        )
    memory = f", GPU weights {r['gpu_weights_gb']:.2f} GB, peak {r['gpu_peak_gb']:.2f} GB" if "gpu_peak_gb" in r else ""
    print(
        f"{kind}: {r['params'] / 1e6:.1f}M parameters, {r['dtype']}, chunk {r['chunk_shape']}, finite "
        f"{r['finite']}{memory}",
        flush=True,
    )
    if "profile" in r:
        p = r["profile"]
        print(
            f"{kind} K={k} chunk profiled: {p['wall_ms_per_call']} ms a call, device busy {p['device_ms_per_call']} "
            f"ms, {p['kernels_per_call']} kernels",
            flush=True,
        )
        for title in ("top_host_self_ms", "top_device_self_ms"):
            for name, ms, count in p[title][:8]:
                print(f"  {title[4:8]} {ms:8.3f} ms  x{count:<7} {name[:90]}", flush=True)


def largest_fitting(models: dict, step: str) -> str | None:
    fits = [(r["params"], kind) for kind, r in models.items() if "error" not in r and r[step]["fits"]]
    return max(fits)[1] if fits else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny configurations of the same architectures")
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cuda:N or cpu")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=None, help=f"default: {' '.join(MODELS)}")
    parser.add_argument(
        "--calls", type=int, default=None, help="timed calls per figure (default 100 on CUDA, 20 on CPU, --quick 5)"
    )
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 5 on CUDA, 1 on CPU)")
    parser.add_argument(
        "--dtype", choices=("bfloat16", "float32"), default=None, help="default bfloat16 on CUDA, float32 on CPU"
    )
    parser.add_argument("--control-hz", type=float, default=10.0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1, as an actor runs: the "
        "noise actor and the host side of each call; the H100 figures of 2026-11-23 ran with 16)",
    )
    parser.add_argument(
        "--reinflow",
        type=int,
        default=0,
        help="time ReinFlow on SmolVLA's action expert over this "
        "many decisions (acting, one PPO update in minibatches of --minibatch, peak memory)",
    )
    parser.add_argument("--minibatch", type=int, default=16)
    parser.add_argument(
        "--compile",
        default=None,
        metavar="MODE",
        help="lerobot's compile_model with this "
        "torch.compile mode (reduce-overhead: CUDA graphs; max-autotune: lerobot's default); the "
        "warm-up calls pay the compilation",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="profile this many K-step chunk calls of each model "
        "after the timing (torch.profiler): host and device time, kernels, the top operators",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = args.device.startswith("cuda")
    if not args.quick and not cuda and args.models is None:
        sys.exit(
            "bench/vla.py: real-size VLAs on a CPU take seconds a call and π0/π0.5 minutes to build (4B "
            "parameters): run --quick, --device cuda, or name the models, e.g. --models smolvla --calls 2"
        )
    models = args.models or list(MODELS)
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.calls = args.calls or (5 if args.quick and not cuda else 100 if cuda else 20)
    args.warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    period_ms = 1e3 / args.control_hz
    start = time.perf_counter()
    import lerobot
    import transformers

    results = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name(args.device) if cuda else cpu_model(),
        "torch": torch.__version__,
        "lerobot": lerobot.__version__,
        "transformers": transformers.__version__,
        "quick": args.quick,
        "dtype": args.dtype,
        "compile": args.compile,
        "calls": args.calls,
        "warmup": args.warmup,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "control_period_ms": period_ms,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "cameras": list(CAMERAS),
        "camera_hw": list(QUICK_CAMERA_HW if args.quick else CAMERA_HW),
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for kind in models:
            try:
                r = one_model(kind, args, Path(tmp))
            except Exception as err:  # noqa: BLE001 (one model failing keeps the others' figures)
                traceback.print_exc()
                r = {"error": f"{type(err).__name__}: {err}".splitlines()[0][:500]}
                print(f"{kind}: failed: {r['error']}", flush=True)
            else:
                report(kind, r, period_ms)
            results["models"][kind] = r
            gc.collect()  # the policy (and any traceback holding it) goes before the next model is built
            if cuda:
                torch.cuda.empty_cache()
    if args.reinflow:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                r = reinflow_smolvla(args, Path(tmp), args.reinflow, args.minibatch)
            except Exception as err:  # noqa: BLE001 (the timings above stand)
                traceback.print_exc()
                r = {"error": f"{type(err).__name__}: {err}".splitlines()[0][:500]}
            else:
                a, peak = r["act_per_decision"], r.get("gpu_peak_gb")
                print(
                    f"ReinFlow on SmolVLA's action expert (K={r['steps']}, {r['trainable_params'] / 1e6:.1f}M "
                    f"trainable parameters, {r['sent_params'] / 1e6:.1f}M sent to actors): acting p50 "
                    f"{a['p50_ms']:.1f} ms p99 {a['p99_ms']:.1f} ms a decision; one PPO epoch over {r['decisions']} "
                    f"decisions in minibatches of {r['minibatch']}: {r['update_ms_per_decision']:.1f} ms a decision"
                    + (f"; GPU peak {peak:.1f} GB" if peak else ""),
                    flush=True,
                )
            results["reinflow_smolvla"] = r
            gc.collect()
    results["largest_fitting"] = {
        "k_step": largest_fitting(results["models"], "dsrl_step"),
        "one_step": largest_fitting(results["models"], "dsrl_step_one_step"),
    }
    results["wall_s"] = round(time.perf_counter() - start, 1)
    print(
        f"largest VLA whose DSRL actor step fits {period_ms:.0f} ms (p99): K-step "
        f"{results['largest_fitting']['k_step']}, one-step {results['largest_fitting']['one_step']} "
        f"(of {', '.join(models)}; {results['wall_s']} s)",
        flush=True,
    )
    write_result("vla", results, args.quick)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
