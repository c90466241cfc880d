"""Evaluate a LeRobot HIL-SERL checkpoint on gym-hil with LeRobot's own policy class, processors and env
stepping (see run.py): deterministic and stochastic, fixed seeds, success from the simulator."""

from __future__ import annotations

from pathlib import Path

from robo_rl.eval.episodes import wilson_interval


def evaluate(ckpt_model_dir: Path, cfg_path: Path, n_episodes: int, seed0: int, overrides: dict) -> dict:
    import draccus
    import hilserl_launch
    import numpy as np
    import torch
    from lerobot.policies import make_pre_post_processors
    from lerobot.policies.gaussian_actor.modeling_gaussian_actor import GaussianActorPolicy
    from lerobot.processor import TransitionKey
    from lerobot.rl.gym_manipulator import (
        make_processors,
        make_robot_env,
        reset_and_build_transition,
        step_env_and_process_transition,
    )
    from lerobot.rl.train_rl import TrainRLServerPipelineConfig

    if overrides:
        hilserl_launch._patch_gym_hil_make(overrides)
    cfg = draccus.parse(TrainRLServerPipelineConfig, config_path=str(cfg_path), args=[])  # only cfg.env is used

    policy = GaussianActorPolicy.from_pretrained(str(ckpt_model_dir))
    policy.eval()
    pre, post = make_pre_post_processors(policy_cfg=policy.config, pretrained_path=str(ckpt_model_dir))
    in_keys = set(policy.config.input_features)

    env, teleop = make_robot_env(cfg.env)
    env_proc, act_proc = make_processors(env, teleop, cfg.env, "cpu")

    def act(obs, deterministic: bool):
        nobs = pre.process_observation(obs)
        if deterministic:
            _, _, means = policy.actor(nobs, None)
            cont = torch.tanh(means)  # mode of the tanh-squashed Gaussian
            disc = torch.argmax(policy.discrete_critic(nobs, None), dim=-1, keepdim=True)
            a = torch.cat([cont, disc.to(cont.dtype)], dim=-1)
        else:
            a = policy.select_action(batch=nobs)
        cont = post.process_action(a[..., :-1])
        return torch.cat([cont, a[..., -1:].to(cont.dtype)], dim=-1)

    results = {}
    for mode in ("deterministic", "stochastic"):
        succ, lens = [], []
        for i in range(n_episodes):
            seed = seed0 + i
            torch.manual_seed(seed)  # the stochastic mode's action noise
            # gym-hil draws the block position from numpy's global generator (random_block_position=True);
            # LeRobot's reset_and_build_transition calls env.reset() without a seed
            np.random.seed(seed)
            tr = reset_and_build_transition(env, env_proc, act_proc)
            n, ok = 0, False
            while True:
                obs = {k: v for k, v in tr[TransitionKey.OBSERVATION].items() if k in in_keys}
                with torch.no_grad():
                    action = act(obs, mode == "deterministic")
                tr = step_env_and_process_transition(env, tr, action, env_proc, act_proc)
                n += 1
                ok = ok or bool(tr[TransitionKey.INFO].get("succeed", False)) or float(tr[TransitionKey.REWARD]) >= 1.0
                if tr.get(TransitionKey.DONE, False) or tr.get(TransitionKey.TRUNCATED, False):
                    break
            succ.append(ok)
            lens.append(n)
        k = sum(succ)
        lo, hi = wilson_interval(k, n_episodes)
        results[mode] = {
            "successes": k,
            "episodes": n_episodes,
            "success_rate": k / n_episodes,
            "wilson95": [round(lo, 3), round(hi, 3)],
            "mean_len": sum(lens) / len(lens),
            "mean_len_successful": (sum(n for n, s in zip(lens, succ, strict=True) if s) / k) if k else None,
        }
        print(
            f"[eval] {mode}: {k}/{n_episodes}  Wilson95 [{lo:.2f}, {hi:.2f}]  mean len {results[mode]['mean_len']:.1f}",
            flush=True,
        )
    env.close()
    return results
