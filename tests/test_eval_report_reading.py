"""Suite reports a person can read: the figures stay in view at 1400 px beside a dozen overrides (checked in
Chromium), conditions a state-only policy cannot perceive are marked and kept out of the chart, and filming the
clips after the episodes shows its own progress."""

from __future__ import annotations

import os
import shutil

import pytest

from robo_rl.eval.conditions import Condition, Suite, load_suite
from robo_rl.eval.report import compare_markdown, compare_reports, write_suite_report
from robo_rl.eval.suite import summarize

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
READER_WIDTH_PX = 1400
SUITE = load_suite("pick_robustness")
CAMERA_ONLY = ("light", "camera_pos", "fovy", "image_noise")  # the suite's conditions that change only images


def episodes(n: int, cameras: list[str], successes: int) -> list[dict]:
    return [
        {
            "episode": i,
            "seed": SUITE.seed + i,
            "success": i < successes,
            "length": 40,
            "return": 0.0,
            "ended_by": "env" if i < successes else "time_limit",
            "failure_mode": None if i < successes else "timed_out",
            "interventions": 0,
            "episode_s": 2.0,
            "step_ms": 5.0,
            "cameras": cameras,
        }
        for i in range(n)
    ]


def report_of(cameras: list[str]) -> dict:
    return {
        "suite": SUITE.name,
        "checkpoint": "/runs/x/checkpoints/step_000010000.pt",
        "env_steps": 10000,
        "episodes": 4,
        "seed": SUITE.seed,
        "score": "env",
        "real_robot": False,
        "stopped": None,
        "conditions": [summarize(c, episodes(4, cameras, 3)) for c in SUITE.conditions],
    }


def test_the_figures_stay_in_view_at_1400_px_beside_the_all_together_overrides(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    report = report_of([])
    assert max(len(" ".join(c["overrides"])) for c in report["conditions"]) > 400  # all_strong's dozen overrides
    write_suite_report(tmp_path, report)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": READER_WIDTH_PX, "height": 900})
            page.goto((tmp_path / "report.html").as_uri())
            edges = page.evaluate(
                """() => Object.fromEntries([...document.querySelectorAll('th')].map(
                    th => [th.textContent, th.getBoundingClientRect().right]))"""
            )
            success_left = page.evaluate(
                """() => [...document.querySelectorAll('th')].find(th => th.textContent === 'success')
                    .getBoundingClientRect().left"""
            )
        finally:
            browser.close()
    assert success_left < READER_WIDTH_PX / 2, f"the success column starts at {success_left:.0f} px"
    for column in ("success", "rate", "Wilson 95% CI"):
        assert edges[column] <= READER_WIDTH_PX, f"'{column}' ends at {edges[column]:.0f} px, past {READER_WIDTH_PX}"


def test_conditions_a_state_only_policy_cannot_see_are_marked_and_left_out_of_the_chart(tmp_path):
    blind = report_of([])
    by_name = {c["name"]: c for c in blind["conditions"]}
    camera_only = [n for n in by_name if n.startswith(CAMERA_ONLY)]
    assert len(camera_only) == 8 and all(by_name[n]["seen"] == "none" for n in camera_only)
    assert by_name["nominal"]["seen"] == "all" and by_name["mass_x4"]["seen"] == "all"
    for together in ("all_mild", "all_strong"):  # the physical half of them is tested; the image half is not
        assert by_name[together]["seen"] == "part"
        assert sorted(by_name[together]["not_seen"]) == sorted(
            o for o in by_name[together]["overrides"] if "light" in o or "camera" in o or "image_noise" in o
        )
        assert len(by_name[together]["not_seen"]) == 4
    write_suite_report(tmp_path / "blind", blind)
    html = (tmp_path / "blind" / "report.html").read_text()
    md = (tmp_path / "blind" / "report.md").read_text()
    assert html.count("<rect") == len(SUITE.conditions) - len(camera_only)  # no bar for what it cannot see
    assert "the policy observes: the state only" in md and "the policy observes: the state only" in html
    for name in camera_only:
        assert f"| {name} (not seen by this policy: state-only" in md
    assert "| all_mild (camera, light and image-noise parts not seen by this policy: state-only) |" in md
    assert html.count("<code class='unseen'") == 8 + 4 + 4  # each unseen override struck through, once

    sighted = report_of(["front", "wrist"])
    assert all(c["seen"] == "all" and c["not_seen"] == [] for c in sighted["conditions"])
    write_suite_report(tmp_path / "sighted", sighted)
    assert (tmp_path / "sighted" / "report.html").read_text().count("<rect") == len(SUITE.conditions)
    assert "the policy observes: the state and cameras front, wrist" in (tmp_path / "sighted" / "report.md").read_text()

    comparison = compare_markdown(compare_reports([("pixels", sighted), ("state", blind)]), "Comparison")
    light = next(line for line in comparison.splitlines() if line.startswith("| light_x0.4-1.6 "))
    assert light.count("(not seen: state-only)") == 1  # the state policy's cell only
    assert "(part not seen: state-only)" in next(ln for ln in comparison.splitlines() if ln.startswith("| all_mild "))


def test_a_report_without_the_cameras_recorded_claims_nothing():
    old = [{k: v for k, v in r.items() if k != "cameras"} for r in episodes(2, [], 1)]
    c = summarize(Condition("light", ("env.randomize.light_scale=[0.4,1.6]",)), old)
    assert c["cameras"] is None and c["seen"] == "all" and c["not_seen"] == []


def test_filming_the_clips_shows_its_progress(tmp_path, capsys):
    from robo_rl.config import load_saved_config
    from robo_rl.eval.suite import run_suite
    from robo_rl.runs import load_checkpoint
    from tests.test_eval_suite import make_run

    run = make_run(tmp_path, "good", "good")
    suite = Suite("two", 2, 1000000, (Condition("nominal"), Condition("horizon_4", ("env.max_episode_steps=4",))))
    cfgs = [load_saved_config(run / "config.yaml", list(c.overrides)) for c in suite.conditions]
    result = run_suite(suite, cfgs, load_checkpoint(run), film=True, clip_dir=tmp_path / "clips", progress=True)
    assert all(result.clips)  # each condition filmed
    err = capsys.readouterr().err
    assert "clips (a success and a failure each)" in err and "2/2" in err.split("clips (")[-1]


def test_the_learning_curve_says_what_its_return_is_and_when_it_has_no_episodes(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from robo_rl.eval.episodes import plot_learning_curve

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read it
    metrics = [{"kind": "episode", "env_steps": 10 * i, "success": i % 2, "return": -i} for i in range(1, 101)]
    plot_learning_curve(metrics, tmp_path / "a.png", None)
    plot_learning_curve([], tmp_path / "b.png", {"success_rate": 0.5, "success_ci95": [0.2, 0.8], "episodes": 10})
    trained, empty = figures
    assert trained.axes[1].get_title() == "return (training episodes, rolling 20)"
    assert [t.get_text() for ax in empty.axes for t in ax.texts] == ["no training episodes in this run's metrics"] * 2
    assert (tmp_path / "a.png").exists() and (tmp_path / "b.png").exists()
    monkeypatch.undo()
    for figure in figures:
        plt.close(figure)
