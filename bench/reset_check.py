"""The camera reset check (`env.reset_check=camera`, issue 52) against the state check, on the pick sim.

A real robot's scene is seen only by its cameras; the sim's state check (`reset_problem`: the cube in its start
region, on the table, at rest, the gripper open, the arm home) knows the truth. This bench measures what a user of
the camera check gets, with the state check as the reference:

  quality   a reset classifier trained from a few dozen frames auto-labelled by the state check (`--train-scenes`
            scenes, three frames each: the env's placement, disturbed, then after the scripted reset; two before
            2026-11-30), then its figures on frames of fresh seeds (`--test-scenes`): accuracy, the rate at which a
            not-ready scene is called ready (the dangerous error) and the rate at which a ready one is called not
            ready (a needless call for a person); for the classifier as `robo-rl reset-check train` makes it
            (`gate`) and without its novelty gate (`no_gate`)
  resets    `--resets` scripted resets in a row, as a run makes them, with the cube's mass and friction drawn per
            episode (env.randomize object_mass_scale [0.5, 2.0], friction_scale [0.7, 1.3]): each episode is a
            noisy scripted pick that, once the cube is up, carries it somewhere at random (a policy ending an
            episode holding it), or random flailing; then the scripted reset, then both checks on the same scene;
            where the state check fails the simulated person puts the scene back, as the ResetWrapper's would.
            The scripted reset seldom fails, so a share of the resets (`--arm-only`, a quarter) fail more often: a
            taught reset that only takes the arm home (`replay_reset` of the home pose), the cube left where it fell.
            Reported, overall and per kind of reset: how often the two agree, the camera check's needless calls
            (state ready, camera not) and its misses (state not ready, camera ready), and each check's time (the
            camera's: a render and the CNN)

Both envs render two 64x64 cameras (front, wrist), as experiment=residual_pick_cube_pixels. Nothing of the pick
task's physics is touched; the episodes render no frame (the policies read the state), the checks do.

    python bench/reset_check.py             # 24 + 50 scenes, 100 resets: a few minutes on a quiet CPU
    python bench/reset_check.py --quick     # 12 + 10 scenes, 20 resets
    python bench/reset_check.py --train-scenes 72   # more labelled frames: bench/results/reset_check_72_scenes.json

The last line is one JSON object; the file goes to bench/results/reset_check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from bench._results import write_result  # noqa: E402

CAMERAS = ("front", "wrist")
IMAGE_SIZE = 64
RANDOMIZE = {"object_mass_scale": [0.5, 2.0], "friction_scale": [0.7, 1.3]}
TOLERANCE_M = 0.03  # pick_cube's reset_tolerance_m default
EXPERT_NOISE = 0.3  # the scripted pick's action noise: it sometimes drops or pushes the cube, as a learning policy
TEST_SEED, RESET_SEED = 10_000, 20_000  # fresh seeds, far from the training scenes'
# The classifier as `robo-rl reset-check train` makes it, and without its novelty gate (which calls a scene unlike
# every ready one it was shown not ready): what the gate buys against what it costs.
VARIANTS = {"gate": {}, "no_gate": {"gate_quantile": None}}


def make_env():
    from sim.pick_cube import PickCubeEnv

    return PickCubeEnv(
        cameras=CAMERAS,
        image_size=IMAGE_SIZE,
        randomize=RANDOMIZE,
        reset_mode="scripted",
        reset_person="sim",
        terminate_on_success=False,  # a lifted cube is carried on (resets): the episode runs its time limit
    )


def quality(train_scenes: int, test_scenes: int, seed: int, folder: Path) -> dict:
    """Label, train each variant on the same frames (saved under `folder`), and measure each on fresh frames."""
    from robo_rl.envs.reset_check import label_reset_frames
    from robo_rl.rewards.reset_classifier import reset_quality, train_reset_classifier

    env = make_env()
    try:
        start = time.monotonic()
        train = label_reset_frames(env, train_scenes, seed=seed)
        test = label_reset_frames(env, test_scenes, seed=TEST_SEED + seed)
        label_s = time.monotonic() - start
    finally:
        env.close()
    out = {"train_frames": len(train), "train_ready": int(train.ready.sum()), "labelling_s": round(label_s, 1)}
    for variant, settings in VARIANTS.items():
        model, report = train_reset_classifier(train, seed=seed, **settings)
        model.save(folder / variant)
        out[variant] = {
            "train_s": round(report["seconds"], 1),
            "gate": report["gate"],
            "held_out_in_training": report["held_out"],
            "fresh": reset_quality(model, test),
        }
    return out


def resets(n: int, folder: Path, seed: int, arm_only_share: float) -> dict:
    """`n` resets in a row, each scene checked by the state check and by each variant's camera check."""
    from robo_rl.envs.reset_check import load_camera_check
    from sim.experts import PickCubeExpert

    env = make_env()
    task = env.unwrapped
    checks = {variant: load_camera_check(folder / variant, task) for variant in VARIANTS}
    expert = PickCubeExpert(task, noise_std=EXPERT_NOISE, seed=seed)
    rng, draw = np.random.default_rng(seed), np.random.default_rng(seed + 1)  # actions; episode and reset kinds
    rows, state_ms, camera_ms = [], [], []
    try:
        obs, _ = env.reset(seed=RESET_SEED + seed)
        for i in range(n):
            if i:
                obs, _ = env.reset(options={"keep_scene": True})
            flail, lifted = bool(draw.random() < 0.5), False  # random actions, else the noisy pick and carry
            arm_only = arm_only_share > 0 and bool(draw.random() < arm_only_share)
            expert.reset()
            with task._cameras_off():  # the policies read the state: the episode's frames are not looked at
                for _ in range(task.max_episode_steps):
                    if flail:
                        action = rng.uniform(-1, 1, 4).astype(np.float32)
                    elif lifted:  # carried at random, held closed
                        action = np.array([*rng.uniform(-1, 1, 2), 0.0, 1.0], np.float32)
                    else:
                        action = expert.act(obs)
                    obs, _, _, _, info = env.step(action)
                    lifted = lifted or bool(info.get("success"))
            if arm_only:
                task.replay_reset(np.array([[*task.ee_start_m, -1.0]]))
            else:
                task.scripted_reset()
            t0 = time.perf_counter()
            state = task.reset_problem(TOLERANCE_M)
            t1 = time.perf_counter()
            frames = task.camera_frames()
            camera = {variant: check.problem(frames) is None for variant, check in checks.items()}
            t2 = time.perf_counter()
            state_ms.append((t1 - t0) * 1e3)
            camera_ms.append((t2 - t1) * 1e3)
            rows.append(
                {
                    "reset": "arm_home_only" if arm_only else "scripted",
                    "episode": "flail" if flail else "pick",
                    "state": state,
                    "cube_outside_cm": outside(task),
                    "camera_ready": camera,
                    "ready_prob": {variant: check.last_prob for variant, check in checks.items()},
                }
            )
            if state is not None:  # the simulated person puts the scene back before the next episode
                task.place_scene(task.np_random)
    finally:
        env.close()
    out = {"resets": n, "state_ready": sum(r["state"] is None for r in rows)}
    for variant in VARIANTS:
        out[variant] = agreement(rows, variant)
        out[variant]["by_reset"] = {
            kind: agreement([r for r in rows if r["reset"] == kind], variant) for kind in ("scripted", "arm_home_only")
        }
    out.update(
        state_check_ms_median=round(float(np.median(state_ms)), 3),
        camera_checks_ms_median=round(float(np.median(camera_ms)), 1),
        what_the_state_check_found=sorted({r["state"] for r in rows if r["state"]}),
        disagreements=[r for r in rows if any((r["state"] is None) != ready for ready in r["camera_ready"].values())],
    )
    return out


def outside(task) -> float:
    """How far the cube lies outside its start region, cm (negative: inside; the check allows TOLERANCE_M)."""
    cube = task.data.xpos[task._cube_body][:2]
    return round(float(np.max(np.abs(cube - task.cube_center_xy_m) - task.cube_xy_range_m)) * 100, 1)


def agreement(rows: list[dict], variant: str) -> dict:
    """The state check and `variant`'s camera check on the same scenes: agreement, needless calls and misses."""
    state_ready = np.array([r["state"] is None for r in rows], bool)
    camera_ready = np.array([r["camera_ready"][variant] for r in rows], bool)
    return {
        "resets": len(rows),
        "state_ready": int(state_ready.sum()),
        "state_not_ready": int((~state_ready).sum()),
        "agree": int((state_ready == camera_ready).sum()),
        "agreement": float((state_ready == camera_ready).mean()) if rows else float("nan"),
        "needless_calls": int((state_ready & ~camera_ready).sum()),
        "missed_not_ready": int((~state_ready & camera_ready).sum()),
        "both_call": int((~state_ready & ~camera_ready).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--train-scenes", type=int, default=None)
    parser.add_argument("--test-scenes", type=int, default=None)
    parser.add_argument("--resets", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arm-only", type=float, default=0.25, help="the share of resets that only home the arm")
    args = parser.parse_args()
    import tempfile

    import torch

    torch.set_num_threads(1)  # a small CNN: a second thread on a shared 2-core machine only spins
    train_scenes = args.train_scenes or (12 if args.quick else 24)
    test_scenes = args.test_scenes or (10 if args.quick else 50)
    n_resets = args.resets or (20 if args.quick else 100)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "reset_classifier"
        figures = quality(train_scenes, test_scenes, args.seed, folder)
        figures["resets"] = resets(n_resets, folder, args.seed, args.arm_only)
    result = {
        "settings": {
            "cameras": list(CAMERAS),
            "image_size": IMAGE_SIZE,
            "randomize": RANDOMIZE,
            "train_scenes": train_scenes,
            "test_scenes": test_scenes,
            "seed": args.seed,
            "expert_noise": EXPERT_NOISE,
            "arm_only_share": args.arm_only,
        },
        **figures,
        "wall_s": round(time.monotonic() - start, 1),
    }
    name = "reset_check" if args.train_scenes is None else f"reset_check_{train_scenes}_scenes"
    path = write_result(name, result, quick=args.quick, measured_code=["robo_rl", "sim", "bench/reset_check.py"])
    print(f"written {path}")
    print(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
