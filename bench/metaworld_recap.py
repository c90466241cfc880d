"""RECAP on the Meta-World SmolVLA (issue 51): per task and seed, `--iterations` rounds of `robo-rl recap` collect →
label → fine-tune (lerobot-train, the advantage label in each frame's prompt: robo_rl/offline/recap_vla.py) → tune,
from the SmolVLA bench/metaworld_vla.py trained, and every policy evaluated the same way on the same held-out seeds.

    python bench/metaworld_recap.py --vla-out outputs/mwvla --tasks pick-place-v3 --seeds 0
    python bench/metaworld_recap.py --quick --vla-out outputs/bench_metaworld_vla   # after metaworld_vla.py --quick

Protocol: the run folder starts empty; its env is bench/metaworld_vla.py's for the task (corner2 camera, sparse
success reward, `--horizon`-step episodes, the same cached demonstrations). Each iteration collects `--episodes`
episodes with the newest policy (the base first, sampled; later the fine-tuned one at its tuned guidance) on
collection seeds of their own, labels everything collected so far and the task's demonstrations
(`recap label ... data=<the demonstrations>`), fine-tunes the base again on all of it (`recap.updates` lerobot-train
steps of `recap.batch_size`), and tunes the guidance scale over `--guidances` on `--validation-episodes` episodes
each (seeds of their own, not stored, counted as validation robot time). The base and the final policy are both
evaluated by `recap collect store=false` (the noise reseeded per episode) on `--eval-episodes` episodes from
eval.seed; the SmolVLA's mode (zero initial noise, bench/metaworld_vla.py's `base_zero_noise`) is quoted beside it
from `--vla-out`'s stages.json where measured, since the mode explains most of DSRL's gain there.
Writes bench/results/<--name> (default metaworld_recap) after every stage, `partial: true` until the end; run again
with the same --out, a finished task and seed is kept and one stopped midway starts again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402
from bench.metaworld_vla import env_overrides  # noqa: E402
from bench.methods import EVAL_SEED, SUCCESS, cli, recap_step, success  # noqa: E402
from robo_rl.offline.recap_vla import fine_tuned_vla  # noqa: E402
from robo_rl.offline.smolvla_train import LAST_MODEL  # noqa: E402


def env_args(a, task: str) -> list[str]:
    """bench/metaworld_vla.py's env and cached demonstrations for `task`, as `--vla-out` recorded them."""
    shared = SimpleNamespace(
        image_size=a.image_size, horizon=a.horizon, demos=a.demos, noise_std=a.noise_std, out=a.vla_out
    )
    return env_overrides(shared, task)


def demonstrations(a, task: str) -> Path:
    """The task's cached demonstration file (bench/metaworld_vla.py recorded it)."""
    from robo_rl.config import load_config
    from robo_rl.data.demos import demos_path

    path = demos_path(load_config(env_args(a, task)))
    if not path.is_file():
        raise SystemExit(f"bench/metaworld_recap.py: no demonstrations at {path}: run bench/metaworld_vla.py first")
    return path


def evaluate(folder: Path, policy: Path, a, log: Path, env: list[str] = ()) -> dict:
    """`policy` on the held-out seeds, as `recap collect` acts; `env`: the overrides a new run folder is made with."""
    out, wall, _ = cli(
        ["recap", "collect", str(folder), f"policy={policy}", f"episodes={a.eval_episodes}", f"seed={EVAL_SEED}",
         "store=false", "logger.progress=false", *env],
        log,
    )  # fmt: skip
    k, n, length = SUCCESS.search(out).groups()
    return success(int(k), int(n)) | {"mean_length": float(length), "wall_s": round(wall, 1)}


def run_task(a, task: str, seed: int, vla: Path, record: dict, keep) -> None:
    folder = Path(a.out) / f"{task}_s{seed}"
    log = Path(a.out) / "logs" / f"{folder.name}.log"
    settings = [f"recap.seed={seed}", f"recap.updates={a.updates}", f"recap.batch_size={a.batch_size}"]
    settings.append(f"recap.max_episode_steps={a.horizon}")
    if a.quick:
        settings += ["recap.value_steps=300"]
    demos = demonstrations(a, task)
    shutil.rmtree(folder, ignore_errors=True)  # a task stopped midway starts again: its collections would mix
    record["base"] = evaluate(folder, vla, a, log, env_args(a, task))  # the run folder made, its env given here
    keep()
    print(f"{task} s{seed} base (sampled): {record['base']}", flush=True)
    cost = {"env_steps": 0, "episodes": 0, "wall_s": 0.0, "cpu_s": 0.0, "iterations": []}
    cost |= {"validation_env_steps": 0, "validation_episodes": 0}
    record["cost"] = cost
    tuned_model = fine_tuned_vla(folder / "recap")
    for i in range(a.iterations):
        policy = tuned_model if i else vla
        seed_i = 200000 + 10000 * seed + 1000 * i
        steps = [
            ["recap", "collect", str(folder), f"policy={policy}", f"episodes={a.episodes}", f"seed={seed_i}",
             "logger.progress=false"],
            ["recap", "label", str(folder), f"data={demos}", *settings],
            ["recap", "finetune", str(folder), f"base={vla}", *settings],
            ["recap", "tune", str(folder), f"guidances={a.guidances}", f"episodes={a.validation_episodes}",
             f"seed={300000 + 10000 * seed + 1000 * i}", "logger.progress=false"],
        ]  # fmt: skip
        for args in steps:
            wall = recap_step(args, log, cost, tuned_model.with_suffix(".guidance.json"))
            cost["iterations"][-1][f"{args[1]}_wall_s"] = round(wall, 1)
            keep()
            print(f"{task} s{seed} iteration {i + 1}: {args[1]} done ({wall:.0f} s)", flush=True)
    record["recap"] = evaluate(folder, tuned_model, a, log)
    record["gain_points"] = round(100 * (record["recap"]["rate"] - record["base"]["rate"]), 1)
    keep()
    print(f"{task} s{seed} RECAP: {record['recap']} ({record['gain_points']:+} points)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one iteration of a few episodes: the plumbing")
    p.add_argument("--vla-out", default=str(ROOT / "outputs" / "bench_metaworld_vla"), help="metaworld_vla.py's --out")
    p.add_argument("--tasks", default="pick-place-v3")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--iterations", type=int, default=None, help="RECAP iterations (2; quick 1)")
    p.add_argument("--episodes", type=int, default=None, help="episodes collected per iteration (200; quick 4)")
    p.add_argument("--updates", type=int, default=None, help="lerobot-train steps per fine-tune (2000; quick 4)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--guidances", default=None, help="scales recap tune tries (1,2,4; quick 1,2)")
    p.add_argument("--validation-episodes", type=int, default=None, help="per scale (30; quick 2)")
    p.add_argument("--eval-episodes", type=int, default=None, help="held-out episodes per policy (50; quick 3)")
    p.add_argument("--demos", type=int, default=10, help="as metaworld_vla.py recorded them")
    p.add_argument("--noise-std", type=float, default=0.3)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--horizon", type=int, default=150)
    p.add_argument("--out", default=str(ROOT / "outputs" / "bench_metaworld_recap"))
    p.add_argument("--name", default=None)
    a = p.parse_args()
    q = a.quick
    a.iterations = a.iterations or (1 if q else 2)
    a.episodes = a.episodes or (4 if q else 200)
    a.updates = a.updates or (4 if q else 2000)
    a.guidances = a.guidances or ("1,2" if q else "1,2,4")
    a.validation_episodes = a.validation_episodes or (2 if q else 30)
    a.eval_episodes = a.eval_episodes or (3 if q else 50)
    if q:
        a.demos = 2
    vla = Path(a.vla_out) / "vla" / LAST_MODEL
    if not (vla / "model.safetensors").is_file():
        raise SystemExit(f"bench/metaworld_recap.py: no SmolVLA at {vla}: run bench/metaworld_vla.py first")
    name = a.name or ("metaworld_recap_quick" if q else "metaworld_recap")
    keys = ("tasks", "seeds", "iterations", "episodes", "updates", "batch_size", "guidances", "validation_episodes")
    result = {k: getattr(a, k) for k in (*keys, "eval_episodes", "horizon")} | {"vla": str(vla), "partial": True}
    stages_file = Path(a.vla_out) / "stages.json"
    known = json.loads(stages_file.read_text()).get("per_task", {}) if stages_file.is_file() else {}
    saved = Path(a.out) / "stages.json"
    Path(a.out).mkdir(parents=True, exist_ok=True)
    stages = json.loads(saved.read_text()) if saved.is_file() else {}

    def keep() -> None:
        saved.write_text(json.dumps(stages, indent=1))
        write_result(name, result | {"runs": stages}, quick=q)

    for task in a.tasks.split(","):
        for seed in a.seeds:
            record = stages.setdefault(f"{task}_s{seed}", {"task": task, "seed": seed})
            if task in known and "base_zero_noise" in known[task]:
                record["smolvla_mode_metaworld_vla"] = known[task]["base_zero_noise"]["success_rate"]
            if "recap" not in record:
                run_task(a, task, seed, vla, record, keep)
    result.pop("partial")
    keep()


if __name__ == "__main__":
    main()
