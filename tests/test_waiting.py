"""tests/waiting.py's wait_until: the condition's value once it holds, a named failure once the time is out."""

import time

import pytest

from tests.waiting import wait_until


def test_wait_until_returns_the_first_truthy_value_once_the_condition_comes_true():
    values = iter([None, [], 0, ["ready"]])
    assert wait_until(lambda: next(values), 5.0, "a value", every_s=0.001) == ["ready"]


def test_wait_until_fails_naming_what_it_waited_for_and_checks_once_more_at_the_deadline():
    checks = []
    start = time.monotonic()
    with pytest.raises(AssertionError, match="timed out after 0.05 s waiting for the learner"):
        wait_until(lambda: checks.append(time.monotonic()), 0.05, "the learner", every_s=0.01)
    assert checks[-1] - start >= 0.05  # the last look comes at or after the deadline, not a sleep short of it
