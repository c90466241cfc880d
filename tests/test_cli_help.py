"""`robo-rl <command> --help` explains the command, its main settings and every config group's options, and the
commands that need no model answer without importing torch or a simulator."""

import contextlib
import io
import json
import subprocess
import sys

import pytest

from robo_rl.cli import main
from robo_rl.config import group_options

CONFIG_COMMANDS = ["train", "learner", "actor", "eval", "show"]


@pytest.fixture(scope="module")
def rendered_help():
    """`main(argv)`'s exit code and stdout, run once per command line for this module's tests (a help page composes the
    config tree to show its defaults, ~0.4 s)."""
    rendered = {}

    def render(*argv):
        if argv not in rendered:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(list(argv))
            rendered[argv] = (code, out.getvalue())
        return rendered[argv]

    return render


@pytest.mark.parametrize("command", [*CONFIG_COMMANDS, "keys"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help(command, flag, rendered_help):
    code, out = rendered_help(command, flag)
    assert code == 0
    assert out.startswith(f"usage: robo-rl {command}")
    assert len(out.splitlines()) > 3  # what it does, not a bare usage line


@pytest.mark.parametrize("command", ["train", "show"])  # the other pages name the options: tests/test_help_pages.py
def test_help_lists_every_option_of_every_config_group_with_a_line_each(command, rendered_help):
    _, out = rendered_help(command, "--help")
    lines = out.splitlines()
    for group in ("env", "algo", "policy", "experiment"):
        assert f"  {group}:" in out
        start = lines.index(f"  {group}:")  # options of one group may share a name with another's (residual)
        section = lines[start + 1 :]
        section = section[: next((i for i, ln in enumerate(section) if not ln.startswith("   ")), len(section))]
        for option, text in group_options(group).items():
            assert text, f"launch/conf/{group}/{option}.yaml needs a first comment line describing it"
            line = next((ln for ln in section if ln.split()[:1] in ([option], [f"*{option}"])), None)
            assert line is not None and text in line, (group, option)


def test_train_help_names_its_main_settings_with_defaults_and_ranges(rendered_help):
    _, out = rendered_help("train", "--help")
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("train.total_env_steps"))
    assert "10000" in line and "[1, inf)" in line  # the default experiment's (residual_pick_cube)
    assert "*pick_cube " in out  # the default option is marked


def test_help_after_overrides_and_help_command_and_data_help(capsys):
    assert main(["eval", "checkpoint=x", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: robo-rl eval")
    assert main(["help", "actor"]) == 0
    assert capsys.readouterr().out.startswith("usage: robo-rl actor")
    assert main(["data", "inspect", "--help"]) == 0
    assert "robo-rl data" in capsys.readouterr().out


def test_a_misspelt_command_gets_a_suggestion(capsys):
    assert main(["trian"]) == 2
    assert "did you mean 'train'?" in capsys.readouterr().err


HEAVY = ("torch", "mujoco", "zmq", "gym_hil", "robosuite")
LIGHT_COMMANDS = [
    ["train", "--help"],
    ["show"],
    ["show", "algo.batch_size=0"],
    ["show", "algo.batch_sise=3"],
    ["train", "algo.actor_lrr=1"],
    ["keys"],
    ["data", "--help"],
    ["bc", "bc.patiense=5"],
    ["distill", "distill.iterations=0"],
    ["launch", "sim_one", "algo.batch_sise=3"],  # the launcher checks every process's config before it starts any
]
# One fresh interpreter imports robo_rl.cli and composes the default config once, then forks a child per command, which
# pays for neither again; what the parent imported is in every child's sys.modules, so it is checked too.
HEAVY_IMPORTS_PER_COMMAND = """
import contextlib, io, json, os, sys, traceback
from robo_rl.cli import main
from robo_rl.config import load_config
load_config([])
for argv in json.loads(sys.argv[1]):
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                main(argv)
            error = None
        except SystemExit as e:  # as a process of its own would end: only a non-zero code is a failure
            error = None if e.code in (0, None) else traceback.format_exc()
        except BaseException:
            error = traceback.format_exc()
        result = {"error": error, "heavy": sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        print(f.read(), flush=True)
    os.wait()
"""


@pytest.fixture(scope="module")
def heavy_imports_per_command():
    argv = [sys.executable, "-c", HEAVY_IMPORTS_PER_COMMAND, json.dumps(LIGHT_COMMANDS), json.dumps(HEAVY)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(LIGHT_COMMANDS), out.stdout + out.stderr
    return {tuple(argv): result for argv, result in zip(LIGHT_COMMANDS, results, strict=True)}


@pytest.mark.parametrize("argv", LIGHT_COMMANDS, ids=" ".join)
def test_commands_that_need_no_model_import_no_torch_or_simulator(argv, heavy_imports_per_command):
    result = heavy_imports_per_command[tuple(argv)]
    assert result["error"] is None, result["error"]
    allowed = {"zmq"} if argv[0] == "launch" else set()  # the launcher finds free ports with ZeroMQ's sockets
    assert set(result["heavy"]) <= allowed, result["heavy"]


def test_a_typed_blocks_settings_show_their_own_dataclasss_default_and_meaning(rendered_help):
    from robo_rl.commands.help import _setting

    _, out = rendered_help("train", "--help")
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("algo.batch_size"))
    assert "256: samples per gradient update; an integer in [1, inf)" in line  # the default algo=residual's field
    assert _setting("algo.batch_size", {"algo": "robo_rl.algos.ppo.build_ppo"}).meaning == "PPO minibatch"
