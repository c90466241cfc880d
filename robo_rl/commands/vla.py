"""`robo-rl vla train`: a SmolVLA trained by lerobot's own `lerobot-train` on a LeRobot dataset robo_rl exported."""

from __future__ import annotations

from robo_rl.commands.common import UsageError

HELP = """usage: robo-rl vla train dataset=<LeRobot dataset> out=<run folder> [vlm=reduced] [steps=6000] [options]

Trains SmolVLA with lerobot's own trainer (lerobot-train: its config, processors, normalisation, checkpoint) on a
LeRobot v3 dataset (robo-rl data convert <run or store> <folder> to=lerobot, or record format=lerobot), offline:
the dataset and the VLM come from local folders, nothing goes to the hub, wandb is off. The trained policy is
<out>/lerobot/checkpoints/last/pretrained_model; <out>/vla_train.json records the run's arguments, time and memory.

the VLM (the backbone SmolVLA builds on):
  vlm=tiny | reduced | smolvlm2_500m   that architecture with random weights (load_vlm_weights=false), written to
                                      <out>/vlm with a tokenizer trained on the dataset's instructions:
                                      tiny: tests (seconds); reduced: a CPU, hidden 256, 4 layers, 64 px images
                                      (about an hour on 2 cores); smolvlm2_500m: SmolVLM2-500M's architecture
                                      (512 px, a GPU)
  vlm=HuggingFaceTB/SmolVLM2-500M-Video-Instruct   the real VLM's weights (a hub id, or its downloaded folder)
  policy_path=lerobot/smolvla_base    fine-tune the whole pretrained SmolVLA instead (a hub id or its folder)

options:
  steps=6000           training steps (reduced: about an hour on 2 cores)   batch_size=8   samples per step
  device=cpu           cpu | cuda | mps            workers=2           data loader processes
  seed=1000            lerobot's seed              tokenizer_max_length=48   the longest instruction, tokens
  threads=<all cores>  torch's CPU threads; 1 can be faster on a small machine busy with other work (measured on
                       2 cores at load 5: 0.60 s/step with 1 against 2.45 with 2; idle, 2 are slightly faster)
  --<lerobot key>=<v>  passed to lerobot-train as it is (e.g. --policy.chunk_size=10 --policy.optimizer_lr=1e-4)

then, as a frozen base (DSRL steers its noise; residual RL corrects its actions), or fine-tuned (ReinFlow: PPO on
its action expert, the VLM frozen); an env's own instruction, where it gives one, comes before the task given here:
  robo-rl train env=pick_cube env.cameras=[front] env.image_size=64 experiment=dsrl_pick_cube algo.form=noise \\
      policy.base.kind=lerobot policy.base.path=<out>/lerobot/checkpoints/last/pretrained_model \\
      policy.base.task="pick up the cube"
  robo-rl train ... experiment=residual_pick_cube demos.num_episodes=0 policy.base.kind=lerobot \\
      policy.base.path=<out>/lerobot/checkpoints/last/pretrained_model policy.base.task="pick up the cube"
  robo-rl train ... experiment=reinflow_pick_cube demos.num_episodes=0 \\
      policy.path=<out>/lerobot/checkpoints/last/pretrained_model policy.task="pick up the cube"
The checkpoint names <out>/vlm by its absolute path: move or copy <out> as a whole (the VLM is found beside it).
"""

INTS = ("steps", "batch_size", "seed", "workers", "tokenizer_max_length", "threads")
KEYS = ("dataset", "out", "vlm", "policy_path", "device", *INTS)


def cmd_vla(args: list[str]) -> int:
    if not args or args[0] in ("help", "-h", "--help") or any(a in ("-h", "--help") for a in args):
        print(HELP)
        return 0 if args else 2
    if args[0] != "train":
        raise UsageError(f"unknown vla command '{args[0]}': robo-rl vla train dataset=<folder> out=<folder>")
    options, extra = {}, []
    for arg in args[1:]:
        if arg.startswith("--"):
            extra.append(arg)
            continue
        key, sep, value = arg.partition("=")
        if not sep or key not in KEYS:
            raise UsageError(f"vla train: '{arg}' is not one of {', '.join(f'{k}=' for k in KEYS)} or --<lerobot key>=")
        options[key] = value
    missing = [k for k in ("dataset", "out") if k not in options]
    if missing:
        raise UsageError(f"vla train needs {' and '.join(f'{k}=' for k in missing)}: robo-rl vla train --help")
    for key in INTS:
        if key in options:
            try:
                options[key] = int(options[key])
            except ValueError:
                raise UsageError(f"vla train: {key}={options[key]} is not a whole number") from None
            if options[key] < (0 if key in ("seed", "workers") else 1):
                raise UsageError(f"vla train: {key}={options[key]} is out of range")
    from robo_rl.offline.smolvla_train import train_smolvla

    model = train_smolvla(**options, extra=extra)
    print(f"trained SmolVLA: {model}")
    print(f"use it as a base: policy.base.kind=lerobot policy.base.path={model}; fine-tune it: policy.path={model}")
    return 0
