"""Baseline of `bench/replay.py`: LeRobot 0.6.1's replay buffer (`lerobot/rl/buffer.py`, `ReplayBuffer`), built as
its learner builds the online buffer and fed as its learner feeds it.

Construction, from `lerobot/rl/learner.py` `initialize_replay_buffer` (the `not cfg.resume` branch, called from
`add_actor_information_and_train`): `ReplayBuffer(capacity=cfg.policy.online_buffer_capacity,
device=cfg.policy.device, state_keys=cfg.policy.input_features.keys(), storage_device=cfg.policy.storage_device,
optimize_memory=True)`, leaving `image_augmentation_function=None` and `use_drq=True`, so sampling augments every
image with `torch.compile(functools.partial(random_shift, pad=4))` (DrQ: replicate-pad 4, random 128x128 crop).
The HIL-SERL policy config's defaults (`configuration_gaussian_actor.py`): device "cpu", storage_device "cpu",
online_buffer_capacity 100000. The capacity here is the number of transitions measured (a 100000-slot buffer of
these float32 frames would be ~39 GB); sampling cost does not depend on the unused slots.

Input is what its learner's `process_transitions` hands `add(**transition)`: the actor's observations as its env
processor makes them (float32 CHW images in [0, 1], here uint8-valued; a batch dim of 1 that `add` squeezes),
a (1, action_dim) action, float reward, bool done/truncated, complementary_info {"discrete_penalty": tensor([0.]),
"is_intervention": bool}. The learner samples through `get_iterator` (a prefetch thread calling `sample`); timed
here is `sample` itself, as that thread runs it.

Like for like, `image_dtype="uint8"`: the same buffer code with its image storage made uint8 (LeRobot allocates every
state tensor in torch's default float32, whatever it is given; here the image tensors `_initialize_storage` made are
swapped for uint8 ones of the same shape before the first `add`, and the actor's frames are fed as uint8 0-255), so
it stores and samples uint8 frames as ours does. Sampled plain only: its DrQ shift (grid_sample) takes float images.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from _lerobot_baseline import lerobot_rl_module

EPISODE_STEPS = 50
LEARNER_DEFAULT_CAPACITY = 100_000  # GaussianActorConfig.online_buffer_capacity


def _image_keys(cameras: int) -> list[str]:
    return [f"observation.images.{c}" for c in ["front", "wrist", *(f"cam{i}" for i in range(2, cameras))][:cameras]]


def _buffer_nbytes(replay) -> dict[str, int]:
    """Bytes of every tensor the buffer allocated, each storage counted once (with optimize_memory=True,
    `next_states` is the same dict as `states`, so next_state costs nothing extra: it is read as states[idx + 1];
    the last step's true next observation is never stored, sample() hands the next episode's first one instead).
    `episode_ends` is allocated (one bool a slot) though add() never writes it."""
    tensors = {f"states.{k}": v for k, v in replay.states.items()}
    tensors |= {f"next_states.{k}": v for k, v in replay.next_states.items()}
    tensors |= {
        "actions": replay.actions,
        "rewards": replay.rewards,
        "dones": replay.dones,
        "truncateds": replay.truncateds,
        "episode_ends": replay.episode_ends,
    }
    tensors |= {f"complementary_info.{k}": v for k, v in replay.complementary_info.items()}
    seen, out = set(), {}
    for name, t in tensors.items():
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            out[name] = t.untyped_storage().nbytes()
    return out


def _transitions(n: int, image_hw, cameras: int, state_dim: int, action_dim: int, gen, uint8: bool) -> list[dict]:
    """`n` transitions in episodes of EPISODE_STEPS, done at the last step; next_state[t] is state[t + 1] (the same
    tensors), as the actor sends them. Images float32 in [0, 1] as LeRobot's env processor makes them, or uint8."""

    def frame() -> torch.Tensor:
        pixels = torch.randint(0, 256, (1, 3, *image_hw), dtype=torch.uint8, generator=gen)
        return pixels if uint8 else pixels.float().div_(255)

    def observation() -> dict[str, torch.Tensor]:
        obs = {k: frame() for k in _image_keys(cameras)}
        return {**obs, "observation.state": torch.randn(1, state_dim, generator=gen)}

    out = []
    while len(out) < n:
        obs = observation()
        for t in range(min(EPISODE_STEPS, n - len(out))):
            nxt = observation()
            done = t == EPISODE_STEPS - 1
            info = {"discrete_penalty": torch.tensor([0.0]), "is_intervention": False}
            out.append(
                {
                    "state": obs,
                    "action": torch.rand(1, action_dim, generator=gen) * 2 - 1,
                    "reward": float(done),
                    "next_state": nxt,
                    "done": done,
                    "truncated": False,
                    "complementary_info": info,
                }
            )
            obs = nxt
    return out


def lerobot_replay_figures(
    num_transitions: int = 2000,
    batch_size: int = 256,
    repeats: int = 20,
    image_hw: tuple[int, int] = (128, 128),
    cameras: int = 2,
    state_dim: int = 18,
    action_dim: int = 4,
    seed: int = 0,
    image_dtype: str = "float32",
) -> dict:
    """Fill LeRobot's ReplayBuffer with `num_transitions` and time `add` and `sample(batch_size)`, with and without
    its DrQ augmentation (without only, for `image_dtype="uint8"`: the like-for-like variant in the module's
    docstring). Times are medians; one warm-up sample per mode (the augmented one runs torch.compile) is not
    counted."""
    uint8 = image_dtype == "uint8"
    # the learner runs with one thread on this 2-core box (as ours does): more intra-op threads would fight the
    # actors and the prefetch thread for the cores
    torch.set_num_threads(1)
    torch.manual_seed(seed)  # sample() draws indices and augmentation offsets from the global generator
    buffer_mod = lerobot_rl_module("buffer")
    capacity = num_transitions
    # cfg.policy.input_features.keys(); the buffer only stores the list and keys its storage by the state dicts
    state_keys = [*_image_keys(cameras), "observation.state"]
    replay = buffer_mod.ReplayBuffer(
        capacity=capacity, device="cpu", state_keys=state_keys, storage_device="cpu", optimize_memory=True
    )
    data = _transitions(
        num_transitions, image_hw, cameras, state_dim, action_dim, torch.Generator().manual_seed(seed), uint8
    )
    if uint8:
        replay._initialize_storage(**{k: data[0][k] for k in ("state", "action", "complementary_info")})
        for key in _image_keys(cameras):  # next_states is the same dict (optimize_memory): it follows
            replay.states[key] = torch.empty_like(replay.states[key], dtype=torch.uint8)

    def fill() -> float:
        t0 = time.perf_counter()
        for tr in data:
            replay.add(**tr)
        return len(data) / (time.perf_counter() - t0)

    first_fill = fill()  # allocates the storage on the first add and touches every page
    # a long-running learner's buffer is resident and wraps: time refills of the full buffer
    add_rates = [fill() for _ in range(min(repeats, 5))]
    assert len(replay) == capacity and replay.states[state_keys[0]].dtype == getattr(torch, image_dtype)

    nbytes = _buffer_nbytes(replay)
    image_bytes = sum(v for k, v in nbytes.items() if k.startswith("states.observation.images."))

    # augmented and plain interleaved, so drift on the shared machine hits both alike; use_drq=False is what the
    # constructor's flag sets, applied to the same filled buffer
    modes = (False,) if uint8 else (True, False)
    times = {True: [], False: []}
    for drq in modes:  # warm-up, not counted (with drq this compiles random_shift: ~30 s here)
        replay.use_drq = drq
        replay.sample(batch_size)
    for _ in range(repeats):
        for drq in modes:
            replay.use_drq = drq
            t0 = time.perf_counter()
            batch = replay.sample(batch_size)
            times[drq].append((time.perf_counter() - t0) * 1e3)
            del batch
    replay.use_drq = True

    return {
        # every allocated tensor's bytes / capacity: CHW images (float32, or uint8 like for like) and state stored
        # once (optimize_memory=True: no next_state copy), action, reward, done, truncated, episode_ends,
        # complementary_info (two float32)
        "bytes_per_transition": sum(nbytes.values()) / capacity,
        "image_bytes_per_transition": image_bytes / capacity,
        "uint8_frame_bytes_per_transition": cameras * 3 * image_hw[0] * image_hw[1],  # for scale: one uint8 copy
        "add_per_s": statistics.median(add_rates),
        "add_per_s_first_fill": first_fill,
        "sample_ms_augmented": statistics.median(times[True]) if times[True] else None,
        "sample_ms_plain": statistics.median(times[False]),
        "capacity": capacity,
        "config": {
            "source": "lerobot.rl.learner.initialize_replay_buffer (online buffer, not resuming)",
            "capacity": capacity,
            "learner_default_capacity": LEARNER_DEFAULT_CAPACITY,
            "device": "cpu",
            "storage_device": "cpu",
            "optimize_memory": True,
            "use_drq": not uint8,
            "image_augmentation_function": "None -> torch.compile(random_shift, pad=4)",
            "image_dtype": str(replay.states[state_keys[0]].dtype).removeprefix("torch."),
            "cameras": cameras,
            "image_hw": list(image_hw),
            "state_dim": state_dim,
            "action_dim": action_dim,
            "episode_steps": EPISODE_STEPS,
            "batch_size": batch_size,
            "repeats": repeats,
            "torch_threads": torch.get_num_threads(),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 transitions, 5 repeats (default 2000, 20)")
    args = parser.parse_args()
    n, reps = (500, 5) if args.quick else (2000, 20)
    print(json.dumps(lerobot_replay_figures(num_transitions=n, repeats=reps)))
