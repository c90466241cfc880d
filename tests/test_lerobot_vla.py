"""A LeRobot VLA with a flow-matching action expert (SmolVLA) as a frozen base steered through its initial noise
(DSRL): a tiny SmolVLA built offline (tests/vla_tiny.py), loaded by path as any pretrained_model folder is."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.lerobot_base import LeRobotBase
from robo_rl.envs import make_observation_space
from tests.test_lerobot_base import action_output, save_tiny, state_inputs, stats, tiny_act  # noqa: F401 (a fixture)
from tests.vla_tiny import lerobot_chunk, write_tiny_smolvla

STATE_DIM, ACTION_DIM, CHUNK, CAMERA, IMAGE_HW, TASK = 4, 2, 4, "top", (24, 32), "pick the cube"
SPACE = make_observation_space(STATE_DIM, {CAMERA: IMAGE_HW})


@pytest.fixture(scope="module")
def tiny_smolvla(tmp_path_factory) -> Path:
    return write_tiny_smolvla(
        tmp_path_factory.mktemp("smolvla") / "pretrained_model",
        STATE_DIM,
        ACTION_DIM,
        CAMERA,
        IMAGE_HW,
        chunk_size=CHUNK,
    )


@pytest.fixture(scope="module")
def smolvla(tiny_smolvla) -> LeRobotBase:
    return LeRobotBase.load(tiny_smolvla, SPACE, ACTION_DIM, task=TASK)


def observation(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "state": rng.standard_normal(STATE_DIM).astype(np.float32),
        "images": {CAMERA: rng.integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)},
    }


def noise(shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_tiny_smolvla_is_built_offline_and_loads_by_path(tiny_smolvla, smolvla):
    size = sum(f.stat().st_size for f in tiny_smolvla.rglob("*") if f.is_file())
    assert size < 4e6, f"the tiny SmolVLA takes {size / 1e6:.1f} MB"
    cfg = json.loads((tiny_smolvla / "config.json").read_text())
    assert cfg["type"] == "smolvla" and Path(cfg["vlm_model_name"]).is_dir()  # its own VLM folder: no hub id
    assert smolvla.inputs == {"observation.state": "state", f"observation.images.{CAMERA}": f"images/{CAMERA}"}
    assert (smolvla.chunk_size, smolvla.action_dim, smolvla.closed_loop) == (CHUNK, ACTION_DIM, False)
    assert smolvla.noise_shape == (cfg["chunk_size"], cfg["max_action_dim"]) == (CHUNK, 32)
    np.testing.assert_allclose(np.stack(smolvla.action_range), [[-1.0] * ACTION_DIM, [1.0] * ACTION_DIM])
    with pytest.raises(ValueError, match="needs a task description: pass task="):
        LeRobotBase.load(tiny_smolvla, SPACE, ACTION_DIM)


def test_the_initial_noise_steers_the_chunk_deterministically(tiny_smolvla, smolvla):
    obs, z = observation(), noise(smolvla.noise_shape)
    smolvla.reset()
    chunk = smolvla.predict_chunk(obs, noise=z)
    assert chunk.shape == (CHUNK, ACTION_DIM) and chunk.dtype == np.float32 and np.all(np.abs(chunk) <= 1.0)
    smolvla.reset()
    np.testing.assert_array_equal(smolvla.predict_chunk(obs, noise=z.copy()), chunk)  # same z: the same chunk
    assert not np.allclose(smolvla.predict_chunk(obs, noise=noise(smolvla.noise_shape, 1)), chunk, atol=1e-4)
    padded = z.copy()
    padded[:, ACTION_DIM:] = 0.0  # the padded columns are cut from the output, yet they enter the action expert
    assert not np.allclose(smolvla.predict_chunk(obs, noise=padded), chunk, atol=1e-5)
    assert not np.allclose(smolvla.predict_chunk(obs), smolvla.predict_chunk(obs), atol=1e-4)  # its own noise
    assert not np.allclose(smolvla.predict_chunk(observation(1), noise=z), chunk, atol=1e-5)  # it sees the obs

    # lerobot's own inference path on the same observation and noise: its processors, predict_action_chunk(noise=)
    theirs = lerobot_chunk("smolvla", tiny_smolvla, obs, z, CAMERA, TASK)
    np.testing.assert_allclose(chunk, theirs, atol=1e-5)


def refused_noise(base: LeRobotBase, z, obs=None) -> str:
    with pytest.raises(ValueError) as err:
        base.predict_chunk(observation() if obs is None else obs, noise=z)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_noise_that_does_not_fit_is_refused_in_one_line(smolvla):
    for shape in ((CHUNK, ACTION_DIM), (1, CHUNK, 32), (32, CHUNK)):
        msg = refused_noise(smolvla, noise(shape))
        assert "must have shape (4, 32)" in msg and f"got {shape}" in msg
    for bad in (np.nan, np.inf):
        z = noise(smolvla.noise_shape)
        z[1, 3] = bad
        assert "must be finite" in refused_noise(smolvla, z)


def test_noise_to_a_policy_that_takes_none_is_refused_in_one_line(tiny_act, tmp_path):  # noqa: F811 (imported)
    act = LeRobotBase.load(tiny_act, make_observation_space(STATE_DIM, {}), ACTION_DIM)
    assert act.noise_shape is None
    obs = {"state": np.zeros(STATE_DIM, np.float32), "images": {}}
    assert "(act) takes no initial noise: its sampler takes none" in refused_noise(act, noise((5, ACTION_DIM)), obs)
    assert act.predict_chunk(obs).shape == (5, ACTION_DIM)  # without noise, as before

    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    for n_obs_steps, shape in ((1, (8, ACTION_DIM)), (2, None)):  # a history runs closed-loop: select_action's noise
        cfg = DiffusionConfig(
            input_features=state_inputs(),
            output_features=action_output(),
            n_obs_steps=n_obs_steps,
            horizon=8,
            n_action_steps=4,
            down_dims=(16, 32),
            diffusion_step_embed_dim=16,
            n_groups=4,
            kernel_size=3,
            num_train_timesteps=4,
            num_inference_steps=2,
            noise_scheduler_type="DDIM",
            pretrained_backbone_weights=None,
            device="cpu",
            push_to_hub=False,
        )
        folder = save_tiny(cfg, tmp_path / f"diffusion{n_obs_steps}", stats(ACTION_DIM))
        diffusion = LeRobotBase.load(folder, make_observation_space(STATE_DIM, {}), ACTION_DIM)
        assert diffusion.noise_shape == shape
        if shape is None:
            assert "takes no initial noise: it runs closed-loop" in refused_noise(diffusion, noise((8, 2)), obs)
        else:  # DDIM: the chunk is a function of its initial sample
            z = noise(shape)
            chunk = diffusion.predict_chunk(obs, noise=z)
            np.testing.assert_array_equal(diffusion.predict_chunk(obs, noise=z), chunk)
            assert not np.allclose(diffusion.predict_chunk(obs, noise=noise(shape, 1)), chunk, atol=1e-5)


def test_tiny_smolvla_predicts_a_chunk_on_cpu_within_its_budget_and_alike_at_any_thread_count(smolvla):
    """One predict_chunk of the tiny SmolVLA on CPU, with torch's threads and with one: the same chunk, and the
    fastest call within 1 s (measured 19-43 ms with one thread on a busy 2-core machine). The figures are printed:
    on a busy machine, threads waiting on each other can cost far more than the model (there: 134-345 ms with 2)."""
    obs, z = observation(), noise(smolvla.noise_shape)
    threads = torch.get_num_threads()
    report, chunks, fastest = [], {}, {}
    try:
        for n in dict.fromkeys((threads, 1)):
            torch.set_num_threads(n)
            smolvla.predict_chunk(obs, noise=z)  # warm-up
            times = []
            for _ in range(5):
                start = time.perf_counter()
                chunks[n] = smolvla.predict_chunk(obs, noise=z)
                times.append(1e3 * (time.perf_counter() - start))
            fastest[n] = min(times)
            report.append(f"{n} thread(s): median {np.median(times):.1f} ms, min {min(times):.1f} ms")
    finally:
        torch.set_num_threads(threads)
    print("\ntiny SmolVLA predict_chunk on CPU, " + "; ".join(report))
    np.testing.assert_allclose(chunks[1], chunks[threads], atol=1e-5)
    assert fastest[1] < 1000.0, report


def test_dsrl_steers_the_vlas_noise_towards_higher_return(smolvla):
    """DSRL's noise-space SAC on the tiny SmolVLA (the learner never runs the VLA): a one-decision task, reward −|a −
    a*|² over the chunk with a* the chunk of one particular noise; the noise actor learns noises whose chunks come
    closer to a* than the VLA's own N(0, I) draws, and than its own chunk before training (the VLA at the actor's
    initial mean noise: already nearer a* than the average draw, 0.5-1.0 std above their mean)."""
    from policies.dsrl import NoisePolicy
    from robo_rl.algos.dsrl import build_dsrl
    from robo_rl.policy_io import obs_to_torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    obs = observation(1)
    policy = NoisePolicy(
        SPACE,
        ACTION_DIM,
        smolvla,
        noise_bound=1.5,
        hidden=[64, 64],
        encoder={"features": 8, "kernels": [3, 3], "strides": [2, 2]},
    )
    algo = build_dsrl(
        policy,
        SPACE,
        ACTION_DIM,
        batch_size=64,
        form="noise",
        critic_updates_per_actor=2,
        lr_actor=3e-3,
        lr_critic=3e-3,
        critic_hidden=[128, 128],
        precision="float32",
    )
    rng = np.random.default_rng(0)
    draws = np.clip(rng.standard_normal((64, *policy.noise_shape)), -1.5, 1.5).astype(np.float32)
    chunks = np.stack([smolvla.predict_chunk(obs, noise=w) for w in draws])
    target = chunks[int(np.argmax(np.linalg.norm(chunks - chunks.mean(0), axis=(1, 2))))]  # reachable, unusual

    def reward(c):
        return -((c - target) ** 2).sum((-1, -2))

    rewards = reward(chunks)
    torch_obs = obs_to_torch(obs)
    unsteered = reward(np.stack([a[0] for a in _chunk_of(policy, torch_obs)]))

    def batch():
        i = rng.integers(0, len(draws), 64)
        o = {
            "state": torch_obs["state"].expand(64, -1),
            "images": {k: v.expand(64, -1, -1, -1) for k, v in torch_obs["images"].items()},
        }
        w = torch.from_numpy(draws[i].reshape(64, -1))
        return {
            "obs": o,
            "next_obs": o,
            "action": torch.zeros(64, CHUNK, ACTION_DIM),
            "discount": torch.zeros(64),
            "reward": torch.from_numpy(rewards[i].astype(np.float32)),
            "extras": {"noise": w},
            "next_extras": {"noise": w},
            "intervention": torch.zeros(64, dtype=torch.bool),
            "next_extras_valid": torch.ones(64, dtype=torch.bool),
        }

    for _ in range(30):  # 5 seeds, 64 draws, at the 30th: >= 2.2 std above the draws' mean, >= 1.2 above unsteered
        algo.update([batch(), batch()])
    policy.reset()
    steered = [reward(np.stack([a[0] for a in _chunk_of(policy, torch_obs)])) for _ in range(3)]
    assert np.mean(steered) > rewards.mean() + 0.5 * rewards.std(), (np.mean(steered), rewards.mean(), rewards.std())
    assert np.mean(steered) > unsteered + 0.5 * rewards.std(), (np.mean(steered), unsteered, rewards.std())


def _chunk_of(policy, torch_obs) -> list:
    """The chunk the policy acts (deterministic: the actor's mean noise), step by step from a fresh chunk."""
    policy.reset()
    return [policy.act(torch_obs, deterministic=True).numpy() for _ in range(CHUNK)]


def test_a_residual_corrects_the_vlas_actions_towards_higher_return(smolvla):
    """The residual method on the tiny SmolVLA as its frozen base: a one-step task, reward −|a − a*|² with a* the
    VLA's own first action shifted by +0.2 in every dimension; the residual learns that shift (within its bound)."""
    from policies.residual import ResidualPolicy
    from robo_rl.algos.residual import build_residual
    from robo_rl.policy_io import obs_to_torch, policy_step

    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = ResidualPolicy(
        SPACE,
        ACTION_DIM,
        smolvla,
        scale=0.3,
        hidden=[64, 64],
        exploration_std=0.0,
        action_range="full",
        encoder={"features": 8, "kernels": [3, 3], "strides": [2, 2]},
    )
    algo = build_residual(
        policy,
        SPACE,
        ACTION_DIM,
        batch_size=64,
        n_step=1,
        critic_updates_per_actor=2,
        lr_actor=3e-3,
        lr_critic=3e-3,
        critic_hidden=[64, 64],
        precision="float32",
        image_augmentation=None,
    )
    obs = observation(2)
    smolvla.reset()
    torch.manual_seed(123)  # the VLA draws its own noise: the same draw here and when the residual policy acts
    base = torch.from_numpy(smolvla.predict_chunk(obs)[0])
    target = (base + 0.2).clamp(-1, 1)
    o = obs_to_torch(obs)
    o64 = {"state": o["state"].expand(64, -1), "images": {k: v.expand(64, -1, -1, -1) for k, v in o["images"].items()}}
    gen = torch.Generator().manual_seed(0)

    def batch():
        a = (base + (torch.rand(64, ACTION_DIM, generator=gen) * 2 - 1) * 0.3).clamp(-1, 1)
        b = base.expand(64, -1)
        return {
            "obs": o64,
            "next_obs": o64,
            "action": a,
            "reward": -((a - target) ** 2).sum(-1),
            "discount": torch.zeros(64),
            "extras": {"base_action": b},
            "next_extras": {"base_action": b},
            "next_extras_valid": torch.ones(64, dtype=torch.bool),
            "intervention": torch.zeros(64, dtype=torch.bool),
        }

    before = float(((base - target) ** 2).sum())
    for _ in range(25):  # 5 seeds: the error is at its plateau (0.25 of before, at most) from the 25th update on
        algo.update([batch(), batch()])
    policy.reset()
    torch.manual_seed(123)
    action = torch.from_numpy(policy_step(policy, obs, deterministic=True)[0])
    after = float(((action - target) ** 2).sum())
    assert after < 0.3 * before, (before, after, action, target)


def _batch_of(observations: list[dict]) -> dict:
    from robo_rl.policy_io import stack_obs

    return stack_obs(observations)


def test_reinflow_on_the_vla_is_its_own_sampler_with_exact_log_probs_and_trains_only_the_action_expert(
    tiny_smolvla, smolvla
):
    """ReinFlow's chain over the SmolVLA's action expert: without noise it is SmolVLA's own Euler sampler (the same
    chunk from the same initial noise); the recorded chain's log-probability is recomputed exactly; only the action
    expert (and the noise network) get gradients; the VLM is a frozen backbone, never in the weights sent."""
    from policies.chain import ChainPolicy
    from robo_rl.algos.base import load_trainable_state, trainable_state

    torch.manual_seed(0)
    steps = smolvla.policy.config.num_steps
    policy = ChainPolicy(SPACE, ACTION_DIM, path=str(tiny_smolvla), method="reinflow", steps=steps, task=TASK)
    assert policy.chain_shape == (steps + 1, *smolvla.noise_shape)
    obs = _batch_of([observation(i) for i in range(3)])
    with torch.no_grad():
        chain, _ = policy.sample_chain(obs, deterministic=True)
    for i in range(3):  # the mean path is SmolVLA's sampler
        own = smolvla.predict_chunk(observation(i), noise=chain[i, 0].numpy())
        np.testing.assert_allclose(policy.model.to_actions(chain[i, -1]).numpy(), own, atol=1e-4)
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
    again, _ = policy.chain_log_prob(obs, chain)
    assert torch.allclose(again, log_prob, atol=1e-4) and again.requires_grad
    again.sum().backward()
    moved = {
        n.split(".vla.model.")[-1].split(".")[0] if ".vla." in n else n.split(".")[0]
        for n, p in policy.named_parameters()
        if p.grad is not None and p.grad.abs().sum() > 0
    }
    assert moved >= {"vlm_with_expert", "action_in_proj", "action_out_proj", "noise_net"}, moved
    vlm = policy.model.vla.model.vlm_with_expert.vlm
    assert not any(p.requires_grad or p.grad is not None for p in vlm.parameters())
    assert any(p.grad is not None for p in policy.model.vla.model.vlm_with_expert.lm_expert.parameters())
    sent = trainable_state(policy)
    assert sent and not any(".vlm_with_expert.vlm." in k or ".state_proj." in k for k in sent)
    other = ChainPolicy(SPACE, ACTION_DIM, path=str(tiny_smolvla), method="reinflow", steps=steps, task=TASK)
    with torch.no_grad():
        for p in other.noise_net.parameters():
            p.add_(1.0)
    load_trainable_state(other, sent)  # what an actor does with the learner's weights
    again_other, _ = other.chain_log_prob(obs, chain)
    assert torch.allclose(again_other, again, atol=1e-5)
    actions, extras = policy.act_with_extras(obs, slots=[0, 1, 2])  # acting: the env's actions, in [-1, 1]
    assert actions.shape == (3, ACTION_DIM) and actions.abs().max() <= 1
    assert extras["chain"].shape == (3, int(np.prod(policy.chain_shape)))


def test_reinflow_moves_the_vlas_action_expert_towards_higher_return(tiny_smolvla):
    """PPO over the SmolVLA's chain on a one-decision task (reward −|a − a*|² over the executed chunk): the action
    expert moves its chunks towards a*, the VLM's weights stay as they were."""
    from policies.chain import ChainPolicy
    from robo_rl.algos.ppo import build_ppo

    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = ChainPolicy(
        SPACE,
        ACTION_DIM,
        path=str(tiny_smolvla),
        method="reinflow",
        steps=2,
        task=TASK,
        sigma_min=0.1,
        sigma_max=0.2,
        noise_hidden=[32],
    )
    vlm_before = {k: v.clone() for k, v in policy.model.vla.model.vlm_with_expert.vlm.state_dict().items()}
    algo = build_ppo(
        policy,
        SPACE,
        ACTION_DIM,
        rollout_env_steps=64,
        batch_size=64,
        epochs=4,
        lr_policy=1e-3,
        lr_value=3e-3,
        clip=0.2,
        value_hidden=[32],
    )
    obs = _batch_of([observation(i % 4) for i in range(64)])
    target = torch.tensor([0.6, -0.4])

    def rollout():
        with torch.no_grad():
            chain, log_prob = policy.sample_chain(obs)
        actions = torch.stack([policy.model.to_actions(c[-1]) for c in chain])
        r = -((actions - target) ** 2).sum((-1, -2))
        batch = {
            "obs": obs,
            "next_obs": obs,
            "reward": r,
            "discount": torch.zeros(64),
            "steps": torch.full((64,), CHUNK),
            "continues": torch.zeros(64, dtype=torch.bool),
            "extras": {"chain": chain.flatten(1), "log_prob": log_prob[:, None]},
        }
        return batch, float(r.mean())

    before = np.mean([rollout()[1] for _ in range(3)])
    for _ in range(15):
        metrics = algo.update([rollout()[0]])
    after = np.mean([rollout()[1] for _ in range(3)])
    assert after > before + 0.3 * abs(before), (before, after, metrics)
    for k, v in policy.model.vla.model.vlm_with_expert.vlm.state_dict().items():
        assert torch.equal(v, vlm_before[k]), f"the frozen VLM moved: {k}"
