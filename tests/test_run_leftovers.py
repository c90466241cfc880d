"""What a failed or interrupted run leaves behind: no empty run folders, folders named after what made them, and the
command that resumes an interrupted run (issue 47, "clutter and small surprises")."""

import signal
from pathlib import Path

import pytest

from robo_rl import cli
from robo_rl.transport.link import free_ports


def isolated(tmp_path) -> list[str]:
    p = free_ports(3)
    return [
        "env=point_reach",
        f"outputs_dir={tmp_path / 'outputs'}",
        f"cache_dir={tmp_path / 'cache'}",
        f"transport.data_port={p[0]}",
        f"transport.weights_port={p[1]}",
        f"transport.ctrl_port={p[2]}",
        "logger.progress=false",
    ]


def run_folders(tmp_path) -> list[Path]:
    return list((tmp_path / "outputs").glob("*/*"))


@pytest.fixture(autouse=True)
def _default_sigterm():
    yield
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a command turns SIGTERM into an interrupt for its process


def test_a_train_that_fails_before_its_first_checkpoint_leaves_no_run_folder(tmp_path, capsys):
    # the residual default with a base that does not exist: refused after the run folder and env spec were made
    code = cli.main(["train", *isolated(tmp_path), "demos.num_episodes=0", "policy.base.path=/nonexistent/base.pt"])
    assert code == 2 and "/nonexistent/base.pt does not exist" in capsys.readouterr().err
    assert run_folders(tmp_path) == [], "a failed start leaves no run folder"


def test_a_distill_that_fails_leaves_no_run_folder(tmp_path, capsys):
    junk = tmp_path / "junk.pt"
    junk.write_text("not a policy")
    code = cli.main(["distill", *isolated(tmp_path), f"checkpoint={junk}"])
    assert code == 2 and f"{junk} is corrupt or unreadable" in capsys.readouterr().err
    assert run_folders(tmp_path) == []


def test_bc_runs_are_named_after_behaviour_cloning_and_the_task_unless_named(tmp_path, capsys):
    args = [*isolated(tmp_path), "demos.num_episodes=3", "bc.epochs=1", "bc.eval_episodes=0"]
    assert cli.main(["bc", *args]) == 0
    (run,) = run_folders(tmp_path)
    assert run.name.endswith("_bc_point_reach"), run.name  # not the default experiment's residual_pick_cube
    assert (run / "bc" / "policy.pt").exists()
    assert cli.main(["bc", *args, "name=my_base"]) == 0
    assert sorted(r.name.split("_", 1)[1] for r in run_folders(tmp_path)) == ["bc_point_reach", "my_base"]
