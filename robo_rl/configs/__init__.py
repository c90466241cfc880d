"""Settings: each component's typed config (`typed.py` gives the field helper; `algo.py`, `run.py`, ... the
dataclasses) and `settings.py`, which checks a composed config against them. No torch and no hydra here: `--help` and
a config check read these before any model or config tree exists."""
