"""Build the TrainRLServerPipelineConfig JSON for LeRobot 0.6.1's HIL-SERL learner/actor on gym-hil PandaPickCube.

State observations only, no human interventions; online only unless `demos_root` names a local LeRobot dataset of
demonstrations (record_demos.py), which the learner loads into its offline replay buffer and samples 50/50 with the
online one. Values follow LeRobot's own
gym_hil SAC example (lerobot/config_examples rl/gym_hil/train_config.json, written for the pre-0.6 `sac` policy
type) mapped onto 0.6.1's split of `policy` (gaussian_actor) and `algorithm` (sac); see README.md for each choice.
"""

from __future__ import annotations

import json
from pathlib import Path

# observation.state = gym-hil agent_pos: qpos(7), qvel(7), gripper ctrl (0..255), tcp_pos(3) = 18-d.
# Min/max of LeRobot's gym_hil example config (stats of its franka_sim_pick_lift demo dataset).
STATE_MIN = [
    -0.6897139549255371,
    -1.1421763896942139,
    -0.5745007991790771,
    -2.97829008102417,
    -0.2710767090320587,
    1.3246592283248901,
    -0.04057434946298599,
    -0.21261805295944214,
    -0.4548068344593048,
    -0.6540042757987976,
    -0.3644964098930359,
    -1.1057522296905518,
    -0.40768879652023315,
    -0.2220114767551422,
    0.0,
    0.19176171720027924,
    -0.3013063669204712,
    0.00362197193317115,
]
STATE_MAX = [
    0.5107022523880005,
    0.5516204237937927,
    0.5620884299278259,
    -1.3330878019332886,
    0.32758936285972595,
    3.119610548019409,
    1.8364211320877075,
    0.25358933210372925,
    0.36316126585006714,
    0.14765967428684235,
    0.49947625398635864,
    0.144814133644104,
    0.2820609211921692,
    0.7382049560546875,
    255.0,
    0.6012658476829529,
    0.3005995750427246,
    0.5004003643989563,
]

# observation.environment_state = gym-hil environment_state: the block position (x, y, z), metres. gym-hil samples
# x in [0.3, 0.5], y in [-0.15, 0.15] and ends the episode if the block leaves them by 5 cm; z rests at 0.02 and
# counts as lifted at +0.1. LeRobot's example has no such key (its sim always renders images, which drops it).
ENV_STATE_MIN = [0.25, -0.2, 0.0]
ENV_STATE_MAX = [0.55, 0.2, 0.3]


def make_config(
    *,
    output_dir: str,
    port: int,
    seed: int = 0,
    online_steps: int = 10_000,
    save_freq: int = 1_000,
    fps: int = 10,
    env_state: bool = True,
    demos_root: str | None = None,
    demos_repo_id: str = "local/gym_hil_pick_cube_expert",
    online_ratio: float = 0.5,
) -> dict:
    """env_state: also feed observation.environment_state (the block position) to the policy; needs the env built
    with image_obs=False (hilserl_launch.py's override), since LeRobot's stock gym_hil env has image_obs=True.
    demos_root: a local LeRobot dataset (record_demos.py) for the learner's offline buffer; `online_ratio` of each
    batch then comes from the online buffer and the rest from it. None: online only (`dataset: null`,
    online_ratio 1.0)."""
    if demos_root is None:
        dataset, ratio = None, 1.0  # online only: no demonstrations
    else:
        # LeRobot 0.6.1 reads a local dataset through DatasetConfig.root (the dataset folder itself; repo_id is then
        # only a name, no hub access). The learner's make_dataset(cfg) -> LeRobotDataset(repo_id, root=root, ...).
        dataset, ratio = {"repo_id": demos_repo_id, "root": str(demos_root), "use_imagenet_stats": False}, online_ratio
    state_ft = {"type": "STATE", "shape": [18]}
    env_ft = {"type": "ENV", "shape": [3]}
    action_ft = {"type": "ACTION", "shape": [3]}  # continuous dx, dy, dz; the gripper is the discrete head
    inputs = {"observation.state": state_ft} | ({"observation.environment_state": env_ft} if env_state else {})
    stats = {"observation.state": {"min": STATE_MIN, "max": STATE_MAX}}
    if env_state:
        stats["observation.environment_state"] = {"min": ENV_STATE_MIN, "max": ENV_STATE_MAX}
    return {
        "output_dir": output_dir,
        "job_name": "gym_hil_pick_cube_state_sac",
        "resume": False,
        "seed": seed,
        "batch_size": 256,
        "log_freq": 100,
        "save_checkpoint": True,
        "save_freq": save_freq,
        "wandb": {"enable": False},
        "dataset": dataset,
        "mixer": "online_offline",
        "online_ratio": ratio,  # OnlineOfflineMixer: int(batch_size * ratio) online, the rest offline
        "env": {
            "type": "gym_manipulator",
            "name": "gym_hil",
            # The teleop-free wrapped variant: EEActionWrapper (xyz in [-1, 1] x 2.5 cm, gripper in {0, 1, 2})
            # + GripperPenaltyWrapper, no InputsControlWrapper, no viewer. (Base-v0 rejects the use_gripper /
            # gripper_penalty kwargs that LeRobot's make_robot_env passes.)
            "task": "PandaPickCube-v0",
            "fps": fps,
            "robot": None,
            "teleop": None,
            "processor": {
                "control_mode": "gamepad",  # unused for gym_hil (no teleop device is created)
                "gripper": {"use_gripper": True, "gripper_penalty": -0.02},
                # No `reset` block: draccus cannot encode ResetConfig (its `fixed_reset_joint_positions: Any | None`
                # raises "typing.Any cannot be used with isinstance()" in cfg.to_dict(), which the learner calls at
                # start-up and at every checkpoint), even with the field left at None. Without it LeRobot adds no
                # TimeLimitProcessorStep and terminate_on_success defaults to True; episodes are capped by
                # gym-hil's registered TimeLimit (max_episode_steps=100; LeRobot's example's 15 s x 10 fps = 150
                # would not bind anyway). The reset pose is gym-hil's own (_PANDA_HOME, the same joint values).
                "reset": None,
            },
            "features": inputs | {"action": action_ft},
            "features_map": {k: k for k in (*inputs, "action")},
        },
        "policy": {
            "type": "gaussian_actor",
            "device": "cpu",
            "storage_device": "cpu",
            "push_to_hub": False,
            "input_features": inputs,
            "output_features": {"action": action_ft},
            "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ENV": "MIN_MAX", "ACTION": "MIN_MAX"},
            "dataset_stats": stats
            | {
                # identity: the env's xyz action space is [-1, 1] (the example's +-0.025 would scale the
                # 2.5 cm EE step a second time)
                "action": {"min": [-1.0, -1.0, -1.0], "max": [1.0, 1.0, 1.0]},
            },
            "vision_encoder_name": None,
            "shared_encoder": True,
            "num_discrete_actions": 3,
            "state_encoder_hidden_dim": 256,
            "latent_dim": 64,
            "online_steps": online_steps,
            "online_buffer_capacity": 100_000,
            "offline_buffer_capacity": 100_000,
            "async_prefetch": False,
            "online_step_before_learning": 100,
            "actor_network_kwargs": {"hidden_dims": [256, 256], "activate_final": True},
            "policy_kwargs": {"use_tanh_squash": True, "std_min": 1e-5, "std_max": 5.0, "init_final": 0.05},
            "discrete_critic_network_kwargs": {
                "hidden_dims": [256, 256],
                "activate_final": True,
                "final_activation": None,
            },
            "actor_learner_config": {
                "learner_host": "127.0.0.1",
                "learner_port": port,
                "policy_parameters_push_frequency": 4,
                "queue_get_timeout": 2,
            },
            "concurrency": {"actor": "threads", "learner": "threads"},
        },
        "algorithm": {
            "type": "sac",
            "actor_lr": 3e-4,
            "critic_lr": 3e-4,
            "temperature_lr": 3e-4,
            "discount": 0.97,
            "use_backup_entropy": True,
            "critic_target_update_weight": 0.005,
            "num_critics": 2,
            "num_subsample_critics": None,
            "critic_network_kwargs": {"hidden_dims": [256, 256], "activate_final": True, "final_activation": None},
            "discrete_critic_network_kwargs": {
                "hidden_dims": [256, 256],
                "activate_final": True,
                "final_activation": None,
            },
            "temperature_init": 0.01,
            "target_entropy": None,
            "utd_ratio": 2,
            "policy_update_freq": 1,
            "grad_clip_norm": 10.0,
            "use_torch_compile": False,
        },
    }


def write_config(path: Path, cfg: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2) + "\n")


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("train_config.json")
    write_config(out, make_config(output_dir="bench/lerobot_hilserl/runs/seed0/learner", port=50051))
    print(out)
