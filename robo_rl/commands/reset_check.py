"""`robo-rl reset-check`: the camera reset check (`env.reset_check=camera`) from a few labelled frames, and its quality.

    robo-rl reset-check label out=<frames.npz> [scenes=72] [random_steps=20] [env=pick_cube env.cameras=[front,wrist]
                              env.image_size=64 ...]
    robo-rl reset-check label out=<frames.npz> human=keyboard|gamepad|... [scenes=40] [env=so101 ...]: a person labels
    robo-rl reset-check train data=<frames.npz>[,<more.npz>] out=<folder> [epochs=200] [seed=0] [max_false_ready=0.01]
                              [cameras=front,wrist]
    robo-rl reset-check eval model=<folder> data=<frames.npz>[,...] [out=<report.json>]

`label` makes labelled frames in a simulator (robo_rl/envs/reset_check.py): per scene the env's own placement, the scene
as an episode or a failed reset may leave it, then after the task's scripted reset, each frame labelled by the task's
own check, which a simulator makes on the true state (seeds from `seed`). With a device (`human=`) a person labels them
at the robot: they set the scene, press success when it is ready as an episode should start or failure when it is not
(the cameras' frames at each press are kept, one scene each), abort to end early. `train` fits the reset classifier
(robo_rl/rewards/reset_classifier.py: the success classifier with "ready" as its positive class), choosing its threshold
on held-out scenes so that at most `max_false_ready` of their not-ready frames are called ready, and writes the model
folder with train_report.json, printed too: held-out accuracy, the rate at which a not-ready scene is called ready (an
episode started from a wrong scene), the rate at which a ready one is called not ready (a person called for nothing),
the frames used. `eval` gives those figures on other frames, such as fresh seeds: the honest test (the held-out scenes
chose the threshold). Use the folder with env.reset_check=camera env.reset_classifier=<folder>.
"""

from __future__ import annotations

import json
from pathlib import Path

from robo_rl.commands.reward import key_value_options
from robo_rl.errors import UserError

USAGE = __doc__.split("\n\n", 2)[1]
LABEL_OPTIONS = ("out", "scenes", "random_steps")
# three frames each; bench/reset_check.py (turned cubes): 72 scenes, 8% needless calls and 3 of 47 misses; 24: 6%, 0
SIM_SCENES = 72
PERSON_SCENES = 40  # presses: a few minutes of a person's time


class ResetCheckUsageError(UserError, ValueError):
    pass


def cmd_reset_check(args: list[str]) -> int:
    commands = {"label": _label, "train": _train, "eval": _eval}
    if not args or args[0] not in commands:
        raise ResetCheckUsageError(USAGE)
    return commands[args[0]](args[1:])


def _number(options: dict, key: str, default, kind=int):
    try:
        return kind(options.get(key, default))
    except ValueError:
        raise ResetCheckUsageError(f"{key}={options[key]}: a {'whole ' if kind is int else ''}number") from None


def _frames(spec: str):
    from robo_rl.envs.reset_check import ResetFrames

    try:
        return ResetFrames.concat([ResetFrames.load(p) for p in spec.split(",") if p])
    except ValueError as e:
        raise ResetCheckUsageError(f"data={spec}: {e}") from None


def _label(args: list[str]) -> int:
    from omegaconf import OmegaConf

    from robo_rl.config import load_config, make_env
    from robo_rl.envs.reset_check import label_by_person, label_reset_frames
    from robo_rl.teleop.devices import make_device

    options = key_value_options([a for a in args if a.split("=", 1)[0] in LABEL_OPTIONS], LABEL_OPTIONS, USAGE)
    overrides = [a for a in args if a.split("=", 1)[0] not in LABEL_OPTIONS]
    if "out" not in options:
        raise ResetCheckUsageError(f"reset-check label needs out=<frames.npz>\n{USAGE}")
    if Path(options["out"]).exists():
        raise ResetCheckUsageError(f"{options['out']} exists: choose a new file for the labelled frames")
    cfg = load_config(overrides)
    devices = OmegaConf.select(cfg, "human.devices", default=None)
    scenes = _number(options, "scenes", PERSON_SCENES if devices else SIM_SCENES)
    env = make_env(cfg)
    try:
        if devices:  # a person at the robot labels what they set up
            device = make_device(OmegaConf.to_container(devices[0], resolve=True), env=env.unwrapped).start()
            try:
                frames = label_by_person(env.unwrapped, lambda: device.read().events, scenes)
            finally:
                device.close()
        else:
            steps = _number(options, "random_steps", 20)
            frames = label_reset_frames(env, scenes, seed=int(cfg.seed), random_steps=steps, progress=True)
    except ValueError as e:
        raise ResetCheckUsageError(str(e)) from None
    finally:
        env.close()
    path = frames.save(options["out"])
    scenes = len(set(frames.scene.tolist()))
    print(f"{len(frames)} frames of {scenes} scenes ({int(frames.ready.sum())} ready) saved to {path}")
    return 0


def _train(args: list[str]) -> int:
    from robo_rl.rewards.reset_classifier import DEFAULT_EPOCHS, MAX_FALSE_READY, train_reset_classifier

    o = key_value_options(args, ("data", "out", "epochs", "seed", "max_false_ready", "cameras"), USAGE)
    for key in ("data", "out"):
        if key not in o:
            raise ResetCheckUsageError(f"reset-check train needs {key}=\n{USAGE}")
    if Path(o["out"]).exists() and any(Path(o["out"]).iterdir()):
        raise ResetCheckUsageError(f"{o['out']} exists and is not empty: choose a new folder for the classifier")
    frames = _frames(o["data"])
    cameras = tuple(c for c in o.get("cameras", "").split(",") if c) or None
    model, report = train_reset_classifier(
        frames,
        cameras,
        epochs=_number(o, "epochs", DEFAULT_EPOCHS),
        seed=_number(o, "seed", 0),
        max_false_ready=_number(o, "max_false_ready", MAX_FALSE_READY, float),
    )
    out = model.save(o["out"])
    report["data"] = o["data"]
    (out / "train_report.json").write_text(json.dumps(report, indent=1, default=float))
    print(f"reset classifier (cameras {report['cameras']}) saved to {out}")
    print(f"use it with env.reset_check=camera env.reset_classifier={out}")
    _print_quality("frames of the held-out scenes (they chose the threshold)", report["held_out"])
    return 0


def _eval(args: list[str]) -> int:
    from robo_rl.rewards.reset_classifier import ResetClassifier, reset_quality

    o = key_value_options(args, ("model", "data", "out"), USAGE)
    for key in ("model", "data"):
        if key not in o:
            raise ResetCheckUsageError(f"reset-check eval needs {key}=\n{USAGE}")
    model = ResetClassifier.open_reset_check(o["model"])
    quality = reset_quality(model, _frames(o["data"]))
    if "out" in o:
        Path(o["out"]).write_text(json.dumps({"model": o["model"], "data": o["data"], **quality}, indent=1))
    _print_quality(f"frames of {o['data']}", quality)
    return 0


def _print_quality(what: str, q: dict) -> None:
    print(
        f"on {q['frames']} {what} ({q['ready_frames']} ready, {q['not_ready_frames']} not), threshold "
        f"{q['threshold']:.2f}: accuracy {q['accuracy']:.3f}; not ready called ready {q['false_ready_rate']:.3f} "
        f"({q['false_ready']}); ready called not ready, a needless call {q['needless_call_rate']:.3f} "
        f"({q['needless_calls']})"
    )
