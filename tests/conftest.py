import logging
import os

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(autouse=True)
def _no_stale_log_handlers():
    """A CLI run inside a test configures the root logger (`logging.basicConfig`) with a handler on that test's
    captured stderr. Once the test ends that stream is closed: a later test that logs must not write to it (which
    test comes later depends on the order, and with two workers the order changes)."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(level)
