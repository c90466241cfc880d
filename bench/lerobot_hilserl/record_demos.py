"""Record scripted-expert demonstrations of gym-hil PandaPickCube as a local LeRobot dataset, for LeRobot's learner.

    .venv/bin/python bench/lerobot_hilserl/record_demos.py --episodes 20 --out DIR [--seed 100000] [--stock-env]

The episodes are taken in LeRobot's own env, built as its actor builds it: `make_robot_env` / `make_processors` /
`step_env_and_process_transition` from `lerobot.rl.gym_manipulator`, the env block of the run's config
(make_config.py) and the same `gym.make` overrides as the run (hilserl_launch.py, $LEROBOT_GYM_HIL_OVERRIDES; default:
task_overrides.py's TASK_OVERRIDES). So every frame holds exactly what the actor would send to the learner:

    observation.state              float32 [18]  gym-hil agent_pos (raw; the policy's preprocessor normalises it)
    observation.environment_state  float32 [3]   block xyz (absent with --stock-env)
    action                         float32 [4]   dx, dy, dz in [-1, 1] (x 2.5 cm), gripper command in {0, 1, 2}
    next.reward                    float32 [1]   the sparse reward after the action
    next.done                      bool    [1]   the episode ended after the action (success / block out of bounds)
    complementary_info.discrete_penalty  float32 [1]  gym-hil's gripper-toggle penalty (the discrete critic adds it)

LeRobot's `ReplayBuffer.from_lerobot_dataset` turns frame t into (state_t, action_t, next.reward, next.done,
state_{t+1}); `action[..., 3]` is rounded to the discrete critic's index. gym-hil's EEActionWrapper maps the gripper
command g to an increment g - 1 of the closing command (clipped to [0, 1], 1 = closed): 0 opens, 1 stays, 2 closes.

The expert is the project's `sim.gym_hil_task.GymHilPickCubeExpert` (above the block, down, close, lift), reading the
simulator through `GymHilPickCubeEnv.task_state`. It commands the gripper as an absolute target (-1 open, +1 closed),
plus Gaussian noise (std 0.1 on all four outputs, as in our own demos); here that target becomes LeRobot's discrete
command: close (2) when the target is closed (> 0) and the gripper command is below half-closed, open (0) in the
opposite case, otherwise stay (1) -- the same increment our adapter computes, rounded to gym-hil's three steps.

Only successful episodes are written; like our own demos (robo_rl.data.demos), recording goes on until N have succeeded,
at most 3N attempts. Episode i places the block with numpy's global generator seeded with seed + i (gym-hil draws
the block from it; LeRobot resets without a seed); the expert's noise is seeded with `seed`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ["HF_HUB_OFFLINE"] = "1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(HERE), str(REPO)):
    if p not in sys.path:
        sys.path.insert(0, p)

from task_overrides import TASK_OVERRIDES  # noqa: E402

DEFAULT_REPO_ID = "local/gym_hil_pick_cube_expert"
GRIPPER_OPEN, GRIPPER_STAY, GRIPPER_CLOSE = 0.0, 1.0, 2.0  # gym-hil EEActionWrapper: increment = command - 1


class _LeRobotEnvView:
    """What GymHilPickCubeExpert reads from our adapter (`task_state`, `ee_step_m`), on LeRobot's gym-hil env."""

    def __init__(self, lerobot_env, ee_step_m: float) -> None:
        self._env = lerobot_env.unwrapped  # gym-hil's PandaPickCubeGymEnv, what our adapter holds as `_env`
        self.ee_step_m = float(ee_step_m)

    def task_state(self) -> dict:
        from sim.gym_hil_task import GymHilPickCubeEnv

        return GymHilPickCubeEnv.task_state(self)  # same attribute names (self._env.data / .model)


def expert_to_lerobot_action(expert_action, gripper_now: float):
    """Our expert's [dx, dy, dz, gripper target in [-1, 1]] -> LeRobot's [dx, dy, dz, gripper command 0/1/2]."""
    import torch

    want_closed = float(expert_action[3]) > 0.0
    if want_closed and gripper_now < 0.5:
        g = GRIPPER_CLOSE
    elif not want_closed and gripper_now > 0.5:
        g = GRIPPER_OPEN
    else:
        g = GRIPPER_STAY
    xyz = torch.as_tensor(expert_action[:3], dtype=torch.float32).clamp(-1.0, 1.0)
    return torch.cat([xyz, torch.tensor([g], dtype=torch.float32)])


def _features(obs_keys: dict[str, int]) -> dict:
    feats = {k: {"dtype": "float32", "shape": (n,), "names": None} for k, n in obs_keys.items()}
    feats["action"] = {"dtype": "float32", "shape": (4,), "names": ["delta_x", "delta_y", "delta_z", "gripper"]}
    feats["next.reward"] = {"dtype": "float32", "shape": (1,), "names": None}
    feats["next.done"] = {"dtype": "bool", "shape": (1,), "names": None}
    feats["complementary_info.discrete_penalty"] = {"dtype": "float32", "shape": (1,), "names": ["discrete_penalty"]}
    return feats


def record_demos(
    n_episodes: int,
    root: Path,
    seed: int = 100_000,
    *,
    repo_id: str = DEFAULT_REPO_ID,
    config_path: Path | None = None,
    overrides: dict | None = None,
    noise_std: float = 0.1,
    max_attempts: int | None = None,
    log=print,
) -> dict:
    """Record until `n_episodes` expert episodes succeeded (at most `max_attempts`, default 3N) into a LeRobot dataset
    at `root` (must not exist). config_path: a TrainRLServerPipelineConfig JSON whose `env` block builds the env
    (default: make_config.py's). overrides: gym.make kwargs for gym_hil/* (default: task_overrides.py's TASK_OVERRIDES;
    {} = LeRobot's stock env). Returns a summary dict (also written to root/recording.json)."""
    import draccus
    import hilserl_launch
    import numpy as np
    import torch
    from gym_hil.wrappers.hil_wrappers import DEFAULT_EE_STEP_SIZE
    from lerobot.datasets import LeRobotDataset
    from lerobot.processor import TransitionKey
    from lerobot.rl.gym_manipulator import (
        make_processors,
        make_robot_env,
        reset_and_build_transition,
        step_env_and_process_transition,
    )
    from lerobot.rl.train_rl import TrainRLServerPipelineConfig

    from sim.gym_hil_task import GymHilPickCubeExpert

    if overrides is None:
        overrides = dict(TASK_OVERRIDES)
    if overrides:
        hilserl_launch._patch_gym_hil_make(overrides)
    root = Path(root)
    if root.exists():
        raise FileExistsError(f"{root} exists; LeRobotDataset.create needs a fresh folder")
    max_attempts = max_attempts or 3 * n_episodes

    with tempfile.TemporaryDirectory() as tmp:
        if config_path is None:
            from make_config import make_config, write_config

            config_path = Path(tmp) / "cfg.json"
            write_config(
                config_path,
                make_config(
                    output_dir=str(Path(tmp) / "unused"), port=0, env_state=bool(overrides.get("image_obs") is False)
                ),
            )
        cfg = draccus.parse(TrainRLServerPipelineConfig, config_path=str(config_path), args=[])  # only cfg.env used
    obs_keys = {k: int(ft.shape[0]) for k, ft in cfg.env.features.items() if k.startswith("observation.")}
    if cfg.env.fps != 10 or not cfg.env.processor.gripper.use_gripper:
        raise ValueError("expects the run's env config: 10 fps, use_gripper")

    env, teleop = make_robot_env(cfg.env)
    env_proc, act_proc = make_processors(env, teleop, cfg.env, "cpu")
    view = _LeRobotEnvView(env, DEFAULT_EE_STEP_SIZE["x"])
    expert = GymHilPickCubeExpert(view, noise_std=noise_std, seed=seed)
    gym_hil_env = env.unwrapped

    ds = LeRobotDataset.create(
        repo_id=repo_id,
        fps=cfg.env.fps,
        features=_features(obs_keys),
        root=root,
        robot_type="panda_gym_hil",
        use_videos=False,
    )
    t0 = time.time()
    kept, attempts, lengths, penalties, outcomes = 0, 0, [], [], []
    while kept < n_episodes and attempts < max_attempts:
        np.random.seed(seed + attempts)  # gym-hil's block position comes from numpy's global generator
        tr = reset_and_build_transition(env, env_proc, act_proc)
        expert.reset()
        frames, success = [], False
        while True:
            obs = {k: tr[TransitionKey.OBSERVATION][k].squeeze(0).to(torch.float32) for k in obs_keys}
            gripper_now = float(gym_hil_env.data.ctrl[gym_hil_env._gripper_ctrl_id]) / 255.0
            action = expert_to_lerobot_action(expert.act({}), gripper_now)
            tr = step_env_and_process_transition(env, tr, action, env_proc, act_proc)
            executed = tr[TransitionKey.COMPLEMENTARY_DATA]["teleop_action"]  # what the actor would send
            done = bool(tr.get(TransitionKey.DONE, False))
            truncated = bool(tr.get(TransitionKey.TRUNCATED, False))
            reward = float(tr[TransitionKey.REWARD])
            frames.append(
                {
                    **{k: v.numpy() for k, v in obs.items()},
                    "action": torch.as_tensor(executed, dtype=torch.float32).reshape(4).numpy(),
                    "next.reward": np.array([reward], np.float32),
                    "next.done": np.array([done], bool),
                    "complementary_info.discrete_penalty": np.array(
                        [tr[TransitionKey.COMPLEMENTARY_DATA].get("discrete_penalty", 0.0)], np.float32
                    ),
                    "task": "pick up the cube and lift it",
                }
            )
            success = success or bool(tr[TransitionKey.INFO].get("succeed", False)) or reward >= 1.0
            if done or truncated:
                break
        attempts += 1
        # keep episodes that end on the success itself (the last frame has next.done True and reward 1)
        ok = success and frames[-1]["next.done"][0]
        outcomes.append(
            {"attempt": attempts - 1, "block_seed": seed + attempts - 1, "success": bool(success), "len": len(frames)}
        )
        if ok:
            for f in frames:
                ds.add_frame(f)
            ds.save_episode()
            kept += 1
            lengths.append(len(frames))
            penalties.append(float(sum(f["complementary_info.discrete_penalty"][0] for f in frames)))
        log(
            f"[demos] attempt {attempts}: {'success' if success else 'failure'} in {len(frames)} steps "
            f"({kept}/{n_episodes} kept)"
        )
    ds.finalize()
    env.close()
    summary = {
        "repo_id": repo_id,
        "root": str(root),
        "episodes_requested": n_episodes,
        "attempts": attempts,
        "successes": sum(o["success"] for o in outcomes),
        "episodes_kept": kept,
        "frames": sum(lengths),
        "mean_len_kept": (sum(lengths) / kept) if kept else None,
        "mean_gripper_penalty_kept": (sum(penalties) / kept) if kept else None,
        "seed": seed,
        "noise_std": noise_std,
        "gym_hil_overrides": overrides,
        "wall_s": round(time.time() - t0, 1),
        "outcomes": outcomes,
    }
    (root / "recording.json").write_text(json.dumps(summary, indent=1))
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, required=True, help="successful episodes to keep (at most 3N attempts)")
    ap.add_argument("--out", type=Path, required=True, help="dataset root (created; must not exist)")
    ap.add_argument("--seed", type=int, default=100_000, help="block seed of attempt i = seed + i; expert noise seed")
    ap.add_argument("--repo-id", default=DEFAULT_REPO_ID)
    ap.add_argument("--noise-std", type=float, default=0.1)
    ap.add_argument("--stock-env", action="store_true", help="LeRobot's unmodified env (no block state, fixed block)")
    ap.add_argument("--overwrite", action="store_true", help="delete --out first")
    args = ap.parse_args()
    if args.overwrite and args.out.exists():
        shutil.rmtree(args.out)
    s = record_demos(
        args.episodes,
        args.out,
        args.seed,
        repo_id=args.repo_id,
        noise_std=args.noise_std,
        overrides={} if args.stock_env else None,
    )
    print(json.dumps({k: v for k, v in s.items() if k != "outcomes"}, indent=1))
    print(
        f"expert succeeded in {s['successes']} of {s['attempts']} episodes; kept {s['episodes_kept']} "
        f"({s['frames']} frames) in {s['root']}"
    )


if __name__ == "__main__":
    main()
