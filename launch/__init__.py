"""Hydra config tree (`conf/`) and launchers."""
