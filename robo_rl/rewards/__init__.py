"""Learned rewards: reward models score frames against a task (base.py), `RewardShaper` turns scores into rewards
and dones (shaper.py), and an actor wrapper applies them without blocking the control loop (wrapper.py).

  classifier.py  a success classifier trained from labelled frames
  progress.py    a VLAC-style pairwise progress critic (a small backbone trained here, or SigLIP from transformers)
"""
