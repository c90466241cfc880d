"""`python bench/figures.py`: every figure README.md quotes agrees with its result file, and a drifted one fails."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_figures(root: Path):
    """bench/figures.py as a module whose ROOT is `root` (a copy of the documents, to make them drift)."""
    spec = importlib.util.spec_from_file_location("bench_figures", ROOT / "bench" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROOT, module.TABLE = root, root / "bench" / "figures.yaml"
    return module


@pytest.fixture
def copy_of_docs(tmp_path: Path) -> Path:
    """README.md, BENCHMARKS.md, the table and the result files it names, in a folder of their own."""
    for name in ("README.md", "BENCHMARKS.md", "bench/figures.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "bench" / "results", tmp_path / "bench" / "results", ignore=shutil.ignore_patterns("*.png"))
    for png in (ROOT / "bench" / "results").glob("*.png"):  # BENCHMARKS.md names plots: present, not copied
        (tmp_path / "bench" / "results" / png.name).touch()
    return tmp_path


def test_every_readme_figure_agrees_with_its_source():
    run = subprocess.run([sys.executable, "bench/figures.py"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all agree" in run.stdout


def test_a_result_file_that_drifts_from_the_readme_fails_naming_the_figure(copy_of_docs: Path, capsys):
    path = copy_of_docs / "bench" / "results" / "learning_hil_gym_pixels_bc.json"
    data = json.loads(path.read_text())
    data["final_success_mean"] = 0.96  # the three-seed mean the README once quoted for six seeds
    path.write_text(json.dumps(data))
    assert load_figures(copy_of_docs).main() == 1
    out = capsys.readouterr().out
    assert "gym-hil from pixels" in out and "README says 0.94" in out and "is 0.96" in out


def test_a_readme_number_off_its_file_or_a_missing_file_fails(copy_of_docs: Path, capsys):
    readme = copy_of_docs / "README.md"
    readme.write_text(readme.read_text().replace("0.88 /\n  0.96 / 0.90 success", "0.88 /\n  0.96 / 0.96 success"))
    (copy_of_docs / "bench" / "results" / "replay.json").unlink()
    assert load_figures(copy_of_docs).main() == 1
    out = capsys.readouterr().out
    assert "README says 0.96" in out and "final_success[2] is 0.9" in out
    assert "bench/results/replay.json does not exist" in out


def test_a_figure_without_a_result_file_must_say_so_and_match_benchmarks(copy_of_docs: Path, capsys):
    readme = copy_of_docs / "README.md"
    text = readme.read_text()
    readme.write_text(text.replace("30-36 s on 2 quiet cores (BENCHMARKS.md, no result file)", "30-36 s on 2 cores"))
    assert load_figures(copy_of_docs).main() == 1
    assert "reach_smoke's train time: README.md no longer has the text" in capsys.readouterr().out
    readme.write_text(text.replace("took 7.9-9.4 s against 3.5 s quiet", "took 7.9-9.4 s against 2.5 s quiet"))
    assert load_figures(copy_of_docs).main() == 1
    assert "README says 2.5" in capsys.readouterr().out


def test_a_benchmarks_section_must_name_its_result_files(copy_of_docs: Path, capsys):
    benchmarks = copy_of_docs / "BENCHMARKS.md"
    text = benchmarks.read_text()
    benchmarks.write_text(
        text.replace("Result file: `bench/results/hardware.json`.", "Figures below.").replace(
            "`bench/results/eval.json`", "`bench/results/eval_gone.json`"
        )
    )
    assert load_figures(copy_of_docs).main() == 1
    out = capsys.readouterr().out
    assert "'Robots: drivers, safety layer, cameras" in out and "names no bench/results/ file" in out
    assert "names bench/results/eval_gone.json, which does not exist" in out


def test_a_percentage_is_read_from_its_fraction_and_a_drifted_one_fails(copy_of_docs: Path, capsys):
    # the README quotes the two-hour run's jitter change as a percentage; its file keeps the fraction
    path = copy_of_docs / "bench" / "results" / "unattended_2h_io_poll.json"
    data = json.loads(path.read_text())
    assert load_figures(copy_of_docs).main() == 0
    data["summary"]["pick"]["jitter_p99_change_last_vs_first"] = 0.048
    path.write_text(json.dumps(data))
    assert load_figures(copy_of_docs).main() == 1
    out = capsys.readouterr().out
    assert "README says 3.8" in out and "jitter_p99_change_last_vs_first x 100 is 4.8" in out
