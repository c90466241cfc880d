import logging
import os
import secrets
import sys

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
# Hypothesis draws each run's examples from this seed; xdist workers inherit it from the controller's environment
os.environ.setdefault("ROBO_RL_HYPOTHESIS_SEED", str(secrets.randbelow(2**32)))


def pytest_report_header(config):
    seed = os.environ["ROBO_RL_HYPOTHESIS_SEED"]
    return f"hypothesis seed: {seed} (replay a failing run with ROBO_RL_HYPOTHESIS_SEED={seed})"


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Each test runs torch on one thread: two xdist workers with a thread per core each spin against each other on
    2 cores (tiny networks gain nothing from a second thread), and a test that set its own count leaves none behind.
    Child processes set theirs from `torch_threads`."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    yield


@pytest.fixture(autouse=True)
def _signal_handlers_put_back():
    """A learner or actor run in pytest's process ends by ignoring SIGINT (`ignore_further_interrupts`, so a second
    Ctrl-C cannot cut its checkpoint short). Left so, every later process this worker starts inherits the ignored
    SIGINT: a `sleep` stand-in then outlives `train`'s SIGINT and is killed 30 s later, and which test comes later
    depends on the order of files on the worker."""
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in before.items():
        if signal.getsignal(s) is not handler:
            signal.signal(s, handler)


@pytest.fixture(autouse=True)
def _no_stale_log_handlers():
    """A CLI run inside a test configures the root logger (`logging.basicConfig`) with a handler on that test's
    captured stderr. Once the test ends that stream is closed: a later test that logs must not write to it (which
    test comes later depends on the order, and with two workers the order changes), nor to a `learner.log` in a run
    folder that went with its test's tmp_path."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in before and type(handler) in (logging.StreamHandler, logging.FileHandler):
            root.removeHandler(handler)  # a FileHandler's run folder goes with its test's tmp_path
            handler.close()
    root.setLevel(level)


# The files whose tests take longest in all (start processes, train), longest first: with `--dist loadfile` a worker
# takes files in collection order, so these start first and the short files fill in around them; alphabetically, a
# long file last left one worker running it alone for minutes while the other idled.
LONG_FILES = (
    "test_cli.py",
    "test_wire_identity.py",
    "test_resume.py",
    "test_launch.py",
    "test_launch_ray.py",
    "test_launch_ssh.py",
    "test_ppo.py",
    "test_pipeline.py",
    "test_residual.py",
    "test_gui.py",
    "test_precision.py",
    "test_sim_robosuite.py",
    "test_lerobot_vla.py",
    "test_vla_bases.py",
    "test_wire_restart.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order
