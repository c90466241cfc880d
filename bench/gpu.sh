#!/usr/bin/env bash
# The GPU figures of BENCHMARKS.md in one go, on a machine with a CUDA device (run from the repository root, in an
# environment with the project's dependencies: `uv run bash bench/gpu.sh [part]`). Parts, each printing its figures
# and writing its JSON under bench/results/ (or $OUT when set):
#   bench   the learner (ours against LeRobot's SAC step, both on the GPU), the residual and SAC updates, the flow
#           policies (BC on the GPU, K-step against one-step latency there, PPO updates there)
#   vla     VLA-sized DSRL actor steps (SmolVLA, π0, π0.5 with random weights; bench/vla.py)
#   finetune  issue 16 at a VLA's size: flow/diffusion PPO iterations and one-step latency at SmolVLA's action-expert
#           size acting on the GPU (bench/flow.py --expert), the VLAs' DSRL steps with one host thread and a profile
#           of a chunk, ReinFlow on a real-size SmolVLA's action expert (bench/vla.py --profile --reinflow)
#   train   short `robo-rl train device=cuda` runs of each algorithm (actor and learner processes), side by side,
#           and the GPU tests
set -uo pipefail
part=${1:-all}
out=${OUT:-bench/results/gpu}
mkdir -p "$out"
export MUJOCO_GL=${MUJOCO_GL:-egl} PYTHONUNBUFFERED=1
py=${PYTHON:-python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || exit 1
if [[ $part == all || $part == bench ]]; then
  $py bench/learner.py --device cuda --seconds 8 2>&1 | tee "$out/learner_cuda.txt"
  $py bench/residual.py --device cuda --precision auto --quick 2>&1 | tail -3 | tee "$out/residual_cuda.txt"
  $py bench/flow.py --device cuda 2>&1 | tail -4 | tee "$out/flow_cuda.txt"
fi
if [[ $part == all || $part == vla ]]; then
  $py bench/vla.py --device cuda 2>&1 | tee "$out/vla_cuda.txt"
fi
if [[ $part == all || $part == finetune ]]; then
  $py bench/flow.py --expert --device cuda 2>&1 | tail -3 | tee "$out/flow_expert_cuda.txt"
  $py bench/vla.py --device cuda --calls 30 --profile 3 --reinflow 64 --minibatch 16 2>&1 | tee "$out/vla_cuda.txt"
  cp bench/results/vla.json "$out/vla_cuda.json"
fi
if [[ $part == all || $part == train ]]; then
  runs=/tmp/robo_rl_gpu_runs
  rm -rf "$runs"
  port=7100
  experiments=(reach_smoke pick_cube_gripper residual_pick_cube dsrl_pick_cube reinflow_pick_cube pick_cube_pixels)
  for exp in "${experiments[@]}"; do
    extra=(train.total_env_steps=2000 train.checkpoint_every_env_steps=1000 eval.episodes=20)
    [[ $exp == reinflow_pick_cube ]] && extra=(train.total_env_steps=4000 train.checkpoint_every_env_steps=2000 eval.episodes=20)
    $py -m robo_rl.cli train experiment=$exp device=cuda "${extra[@]}" logger.progress=false \
      outputs_dir=$runs transport.data_port=$port transport.weights_port=$((port + 1)) \
      transport.ctrl_port=$((port + 2)) > "$runs.$exp.log" 2>&1 &
    port=$((port + 10))
  done
  wait
  for exp in "${experiments[@]}"; do
    echo "== $exp"; grep -E "success|Error|error|crash|Traceback" "$runs.$exp.log" | tail -4
  done | tee "$out/train_cuda.txt"
fi
