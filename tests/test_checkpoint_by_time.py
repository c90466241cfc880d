"""The learner checkpoints by time as well as by env steps (`train.checkpoint_every_s`), whichever comes first, and
writes no timed checkpoint while no data comes."""

import time

from robo_rl.learner import Learner
from tests.test_pipeline import toy_config
from tests.test_resume import messages


def test_a_learner_checkpoints_every_few_seconds_long_before_its_env_step_checkpoint(tmp_path):
    msgs = messages(4)
    env_steps = sum(int((m["step"] > 0).sum()) for m in msgs)
    cfg = toy_config(
        tmp_path,
        f"train.total_env_steps={env_steps}",
        "train.checkpoint_every_env_steps=100000",  # never reached: every checkpoint before the last is a timed one
        "train.checkpoint_every_s=0.2",
        "train.learning_starts=100000",  # no updates: this is about the loop's rhythm
    )
    run = tmp_path / "run"
    run.mkdir()
    learner = Learner(cfg, run, progress=False)
    half = len(msgs) // 2
    # one message per 0.1 s, as a slow robot sends them, with a second of silence in the middle
    arrivals = [*msgs[:half], *[None] * 10, *msgs[half:]]
    sent = {"seq": 0}

    def arriving(timeout_ms=0):
        time.sleep(0.1)
        msg = arrivals.pop(0) if arrivals else None
        if msg is None:
            return []
        sent["seq"] += 1
        return [("actor-0", msg, 5, sent["seq"], None)]

    learner.link.poll = arriving
    at_steps, write = [], learner.checkpoint
    learner.checkpoint = lambda: at_steps.append(learner.env_steps) or write()
    assert learner.run() == "done"
    assert at_steps[-1] == env_steps  # the end-of-run checkpoint; the ones before it came by time
    assert len(at_steps) >= 4, at_steps  # ~0.8 s of data at a 0.2 s rhythm: several timed checkpoints
    assert at_steps == sorted(set(at_steps)), f"a checkpoint without new data: {at_steps}"
    assert len(list((run / "checkpoints").glob("step_*.pt"))) == len(at_steps)
