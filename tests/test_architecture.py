"""The architecture holds: the import contracts in pyproject.toml, no import cycles, rooms of a readable size."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("robo_rl", "policies", "sim", "hardware", "launch")
MAX_LINES = 440  # "about 400": a file beyond it is a sign it holds two ideas
# Files over MAX_LINES that hold one idea each, and why.
LONG_BUT_ONE_IDEA = {
    "sim/pick_cube.py": "one task: its MuJoCo scene, controller and env",
    "robo_rl/transport/link.py": "the learner's side of the wire protocol (its shared names and the LearnerLink)",
    "policies/flow.py": "the flow/diffusion chunk generator and the policy that samples it",
}


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), function-level imports included."""
    modules = sorted(graph.modules)
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in modules:
        if v not in index:
            visit(v)
    return cycles


def test_the_import_contracts_in_pyproject_hold():
    lint_imports = Path(sys.executable).parent / "lint-imports"  # import-linter's command, installed beside python
    out = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and "4 kept, 0 broken" in out.stdout


def test_no_import_cycles_anywhere():
    import grimp

    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The check above can fail: two modules that import each other are reported."""
    import grimp

    pkg = tmp_path / "loop_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from loop_pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from loop_pkg import a\n")  # a lazy import is still an arrow
    (pkg / "c.py").write_text("from loop_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles(grimp.build_graph("loop_pkg", cache_dir=None)) == [["loop_pkg.a", "loop_pkg.b"]]


def test_no_room_is_a_flat_file_of_several_ideas():
    long = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                long[str(path.relative_to(ROOT))] = lines
    assert set(long) <= set(LONG_BUT_ONE_IDEA), {k: v for k, v in long.items() if k not in LONG_BUT_ONE_IDEA}
