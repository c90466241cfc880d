"""The gym-hil task both the run and its recorded demos use, as `gym.make` overrides of LeRobot's PandaPickCube."""

# Our project's gym-hil task (launch/conf/env/gym_hil_pick.yaml): block position sampled per episode and part of the
# state; no cameras. LeRobot's stock sim (`--stock-env`) renders both cameras every step, drops the block position
# from the observation and keeps the block fixed at (0.5, 0).
TASK_OVERRIDES = {"image_obs": False, "random_block_position": True}
