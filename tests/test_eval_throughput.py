"""Throughput and time in evaluation reports: successes per hour with resets counted, cycle time, time to success,
interventions and safety stops per hour, on the wall clock and at the env's control rate, from episode records."""

import pytest
import torch

from robo_rl.eval.conditions import Condition
from robo_rl.eval.episodes import run_condition
from robo_rl.eval.report import write_suite_report
from robo_rl.eval.suite import summarize
from robo_rl.eval.throughput import rate_text, throughput
from sim.point_reach import PointReachEnv

T0 = 1_700_000_000.0  # a wall-clock start; the figures depend only on differences
CONTROL_HZ = 20.0


def record(i: int, success: bool, reset_s: float, steps_s: float, length: int, **extra) -> dict:
    start = T0 + 1000 * i
    return {
        "episode": i,
        "seed": i,
        "success": success,
        "length": length,
        "return": float(success),
        "ended_by": "env" if success else "time_limit",
        "failure_mode": None if success else "timed_out",
        "interventions": 0,
        "episode_s": reset_s + steps_s,
        "step_ms": 1.0,
        "started_at": start,
        "ended_at": start + reset_s + steps_s,
        "reset_s": reset_s,
        "control_hz": CONTROL_HZ,
        "cameras": [],
        **extra,
    }


def three_successes_in_two_minutes() -> list[dict]:
    """90 s of episode steps and 30 s of resets (wall clock); 900 steps, 45 s, at 20 Hz."""
    return [
        record(0, True, 10.0, 20.0, 200),
        record(1, True, 5.0, 30.0, 300, interventions=7, takeovers=2),
        record(2, True, 5.0, 25.0, 100),
        record(3, False, 10.0, 15.0, 300, ended_by="safety", failure_mode="safety_stop"),
    ]


def test_successes_per_hour_count_resets_and_failures_on_both_clocks():
    t = throughput(three_successes_in_two_minutes())
    wall, robot = t["wall"], t["control_rate"]
    assert wall["hours"] == pytest.approx(120 / 3600)
    assert wall["successes_per_hour"] == pytest.approx(90.0)  # 3 in 120 s
    assert wall["cycle_s_mean"] == pytest.approx((30 + 35 + 30) / 3) and wall["cycle_s_median"] == pytest.approx(30)
    assert wall["time_to_success_s"] == pytest.approx(25.0)  # the successes' steps alone
    assert wall["interventions_per_hour"] == pytest.approx(60.0)  # two takeovers, not seven human steps
    assert wall["safety_stops_per_hour"] == pytest.approx(30.0)
    # at 20 Hz the 900 steps take 45 s, plus the same 30 s of resets
    assert robot["successes_per_hour"] == pytest.approx(3 * 3600 / 75)
    assert robot["time_to_success_s"] == pytest.approx((10 + 15 + 5) / 3)
    assert t["primary"] == "control_rate" and t["control_hz"] == CONTROL_HZ
    assert throughput(three_successes_in_two_minutes(), real_robot=True)["primary"] == "wall"
    assert rate_text(t) == "144 successes/h (control rate)"
    assert rate_text(throughput(three_successes_in_two_minutes(), real_robot=True)) == "90 successes/h (wall clock)"
    on_robot = [{**r, "real_robot": True} for r in three_successes_in_two_minutes()]  # hand-reset episodes
    assert summarize(Condition("nominal"), on_robot)["throughput"]["primary"] == "wall"


def test_an_older_record_without_timestamps_or_a_control_rate_still_has_a_wall_clock_figure():
    old = [
        {k: v for k, v in r.items() if k not in ("started_at", "ended_at", "reset_s", "control_hz")}
        for r in three_successes_in_two_minutes()
    ]
    t = throughput(old)
    assert t["control_rate"] is None and t["primary"] == "wall"
    assert t["wall"]["successes_per_hour"] == pytest.approx(90.0)  # episode_s holds the reset
    assert t["wall"]["interventions_per_hour"] == pytest.approx(60.0)
    none = throughput([record(0, False, 1.0, 2.0, 10)])["wall"]
    assert none["successes_per_hour"] == 0 and none["cycle_s_mean"] is None and none["time_to_success_s"] is None


def test_a_suite_report_shows_the_throughput_of_each_condition_and_says_which_clock_is_which(tmp_path):
    cond = Condition("nominal")
    report = {
        "suite": "smoke",
        "checkpoint": "/runs/x/checkpoints/step_000001000.pt",
        "env_steps": 1000,
        "episodes": 4,
        "seed": 0,
        "score": "env",
        "real_robot": False,
        "stopped": None,
        "conditions": [summarize(cond, three_successes_in_two_minutes())],
    }
    write_suite_report(tmp_path, report)
    md = (tmp_path / "report.md").read_text()
    assert "| nominal | wall clock | 0.0333 | 90 | 31.7 | 30 | 25 | 60.00 | 30.00 |" in md
    assert "| nominal | control rate (20 Hz) (primary) | 0.0208 | 144 |" in md
    assert "wall: wall clock" in md and "control_rate: robot time at the env's control rate" in md
    html = (tmp_path / "report.html").read_text()
    assert "Throughput and time" in html and "<td>90</td>" in html and "<td>144</td>" in html


class Still:
    def act(self, obs, deterministic=True):
        return torch.zeros(1, 2)


def test_each_episode_records_its_timestamps_reset_time_and_control_rate():
    env = PointReachEnv(max_episode_steps=3, control_hz=25.0)
    results = run_condition(env, Still(), [1, 2])
    for r in results:
        assert r["started_at"] <= r["started_at"] + r["reset_s"] <= r["ended_at"]
        assert r["control_hz"] == 25.0 and r["length"] == 3 and r["takeovers"] == 0
    assert results[0]["ended_at"] <= results[1]["started_at"]
    t = throughput(results)
    assert t["control_rate"]["hours"] == pytest.approx((6 / 25.0 + sum(r["reset_s"] for r in results)) / 3600)
    assert t["wall"]["successes_per_hour"] == 0
