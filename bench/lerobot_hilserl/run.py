"""Run LeRobot 0.6.1's own HIL-SERL learner + actor on gym-hil PandaPickCube (state obs) for N env steps, then evaluate.

    .venv/bin/python bench/lerobot_hilserl/run.py --seed 0                    # 10,000 env steps, then 50-episode eval
    .venv/bin/python bench/lerobot_hilserl/run.py --seed 0 --env-steps 300 --eval-episodes 2 --tag smoke
    .venv/bin/python bench/lerobot_hilserl/run.py --seed 0 --demos 20 --tag demos20   # + 20 expert demonstrations

0. With --demos N (default 0: online only), first records N successful scripted-expert episodes in LeRobot's own env
   (record_demos.py) as a local LeRobot dataset under OUT/demos, and points the learner's `dataset` at it with
   online_ratio 0.5: the learner loads it into its offline replay buffer and every batch is half online, half demos.

1. Writes the learner and actor configs (make_config.py; the actor gets its own output_dir because the config's
   validate() refuses an existing one) with a free loopback port, online only, wandb off.
2. Starts `hilserl_launch.py learner` (LeRobot's `lerobot.rl.learner.train_cli`), waits for its gRPC server,
   then `hilserl_launch.py actor` (`lerobot.rl.actor.actor_cli`). The actor's loop runs `policy.online_steps` = N env
   steps and returns; the runner then stops both with SIGINT (LeRobot's own shutdown handler). A wall-clock cap stops
   them early (partial run) and the report says so.
3. Progress comes from the logs: the actor's "Global step S: Episode reward: R" lines (sparse reward, the episode
   ends on success, so R == 1 means success) and the learner's "Number of optimization step: K" lines, each stamped
   with the wall time at which the runner saw it.
4. Evaluates the last checkpoint the learner saved (checkpoints/last/pretrained_model) with LeRobot's
   GaussianActorPolicy and its saved pre/post processors, in the env built by LeRobot's own make_robot_env /
   make_processors / step_env_and_process_transition: deterministic (tanh of the Gaussian mean + argmax of the
   discrete gripper critic) and, for reference, LeRobot's stochastic `select_action`; seeds 1000000 + i; success =
   the simulator's sparse reward (block lifted 10 cm), i.e. info["succeed"].

Outputs under --out (default bench/lerobot_hilserl/runs/seed{S}[_{tag}]): configs, learner/actor stdout logs,
LeRobot's output dirs, progress.json (episode + update curves) and summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # the evaluation below builds gym-hil's renderer in this process
os.environ["HF_HUB_OFFLINE"] = "1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from lerobot_eval import evaluate  # noqa: E402
from make_config import make_config, write_config  # noqa: E402
from task_overrides import TASK_OVERRIDES  # noqa: E402

from robo_rl.transport.link import free_ports  # noqa: E402

EPISODE_RE = re.compile(r"Global step (\d+): Episode reward: ([-+0-9.eE]+)")
OPT_RE = re.compile(r"Number of optimization step: (\d+)")


class LogTail:
    """Incrementally read a growing log file; returns complete new lines."""

    def __init__(self, path: Path):
        self.path = path
        self.pos = 0
        self.buf = ""

    def new_lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with self.path.open("r", errors="replace") as f:
            f.seek(self.pos)
            data = f.read()
            self.pos = f.tell()
        self.buf += data
        *lines, self.buf = self.buf.split("\n")
        return lines


def child_env(overrides: dict) -> dict:
    env = os.environ.copy()
    if overrides:
        env["LEROBOT_GYM_HIL_OVERRIDES"] = json.dumps(overrides)
    else:
        env.pop("LEROBOT_GYM_HIL_OVERRIDES", None)
    env.setdefault("MUJOCO_GL", "egl")
    env["HF_HUB_OFFLINE"] = "1"  # no internet: any hub download attempt fails loudly instead of hanging
    env["WANDB_MODE"] = "disabled"
    # 2 shared cores: one torch/BLAS thread per process (learner and actor each get a core)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stop(proc: subprocess.Popen, name: str, timeout: float = 30.0) -> int | None:
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGINT)  # LeRobot's ProcessSignalHandler sets its shutdown_event
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"[run] {name} ignored SIGINT for {timeout}s; SIGTERM", flush=True)
        proc.terminate()
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print(f"[run] {name} ignored SIGTERM; SIGKILL", flush=True)
            proc.kill()
            return proc.wait()


OFFLINE_LOG_MARKERS = ("make_dataset offline buffer", "Convert to a offline replay buffer")
TQDM_TOTAL_RE = re.compile(r"100%\|[^|]*\| (\d+)/(\d+) ")


def record(args, out: Path) -> dict | None:
    """--demos N: record N successful expert episodes into OUT/demos (a local LeRobot dataset)."""
    if args.demos <= 0:
        return None
    from record_demos import record_demos

    t = time.time()
    rec = record_demos(
        args.demos,
        (out / "demos").resolve(),
        args.demo_seed,
        overrides=args.overrides,
        log=lambda m: print(m, flush=True),
    )
    if rec["episodes_kept"] < args.demos:
        raise RuntimeError(f"the expert succeeded in only {rec['successes']} of {rec['attempts']} episodes")
    print(
        f"[run] demos: expert succeeded in {rec['successes']}/{rec['attempts']} episodes; kept "
        f"{rec['episodes_kept']} ({rec['frames']} frames) in {time.time() - t:.0f}s",
        flush=True,
    )
    return rec


def train(args, out: Path, demos: dict | None = None) -> dict:
    port = free_ports(1)[0]
    common = dict(
        port=port,
        seed=args.seed,
        online_steps=args.env_steps,
        save_freq=args.save_freq,
        env_state=not args.stock_env,
        demos_root=demos["root"] if demos else None,
        **({"demos_repo_id": demos["repo_id"]} if demos else {}),
    )
    learner_cfg = make_config(output_dir=str(out / "learner"), **common)
    actor_cfg = make_config(output_dir=str(out / "actor"), **common)
    write_config(out / "learner_config.json", learner_cfg)
    write_config(out / "actor_config.json", actor_cfg)

    env = child_env(args.overrides)
    hilserl_launch = str(HERE / "hilserl_launch.py")
    learner_cmd = [sys.executable, hilserl_launch, "learner", "--config_path", str(out / "learner_config.json")]
    actor_cmd = [sys.executable, hilserl_launch, "actor", "--config_path", str(out / "actor_config.json")]
    print("[run] learner:", " ".join(learner_cmd), flush=True)
    print("[run] actor:  ", " ".join(actor_cmd), flush=True)

    learner_log = out / "learner_stdout.log"
    actor_log = out / "actor_stdout.log"
    t0 = time.time()
    learner = subprocess.Popen(learner_cmd, cwd=REPO, env=env, stdout=learner_log.open("w"), stderr=subprocess.STDOUT)
    ltail, atail = LogTail(learner_log), LogTail(actor_log)

    # wait for the learner's gRPC server
    while True:
        if learner.poll() is not None:
            raise RuntimeError(f"learner exited early (rc={learner.returncode}); see {learner_log}")
        if any("gRPC server started" in line for line in ltail.new_lines()):
            break
        if time.time() - t0 > 300:
            raise RuntimeError("learner did not start its gRPC server within 300 s")
        time.sleep(0.5)
    t_learner_ready = time.time()
    actor = subprocess.Popen(actor_cmd, cwd=REPO, env=env, stdout=actor_log.open("w"), stderr=subprocess.STDOUT)
    t_actor_start = time.time()
    print(f"[run] learner ready after {t_learner_ready - t0:.1f}s; actor started (port {port})", flush=True)

    episodes: list[dict] = []  # {step, reward, success, t}
    opt_steps: list[dict] = []  # {opt_step, t}
    stopped_by = None
    last_print = 0.0
    while True:
        now = time.time()
        for line in atail.new_lines():
            m = EPISODE_RE.search(line)
            if m:
                r = float(m.group(2))
                episodes.append(
                    {
                        "step": int(m.group(1)) + 1,
                        "reward": r,
                        "success": r >= 1.0 - 1e-6,
                        "t": round(now - t_actor_start, 2),
                    }
                )
            if "Policy loop finished" in line:
                stopped_by = "actor finished its env-step budget"
        for line in ltail.new_lines():
            m = OPT_RE.search(line)
            if m:
                opt_steps.append({"opt_step": int(m.group(1)), "t": round(now - t_actor_start, 2)})
        if stopped_by:
            break
        if actor.poll() is not None:
            stopped_by = f"actor exited (rc={actor.returncode})"
            break
        if learner.poll() is not None:
            stopped_by = f"learner exited (rc={learner.returncode})"
            break
        if now - t_actor_start > args.max_wall:
            stopped_by = f"wall-clock cap {args.max_wall:.0f}s reached"
            break
        if now - last_print > 30:
            last_print = now
            k = opt_steps[-1]["opt_step"] if opt_steps else 0
            s = episodes[-1]["step"] if episodes else 0
            last20 = episodes[-20:]
            sr = sum(e["success"] for e in last20) / len(last20) if last20 else float("nan")
            print(
                f"[run] t={now - t_actor_start:7.1f}s env_steps~{s} episodes={len(episodes)} "
                f"opt_steps~{k} last20_success={sr:.2f}",
                flush=True,
            )
        time.sleep(1.0)

    t_stop = time.time()
    print(f"[run] stopping: {stopped_by}", flush=True)
    rc_actor = stop(actor, "actor")
    rc_learner = stop(learner, "learner", timeout=120)
    # final drain of the logs
    for line in atail.new_lines() + [atail.buf]:
        m = EPISODE_RE.search(line)
        if m:
            r = float(m.group(2))
            episodes.append(
                {
                    "step": int(m.group(1)) + 1,
                    "reward": r,
                    "success": r >= 1.0 - 1e-6,
                    "t": round(t_stop - t_actor_start, 2),
                }
            )
    final_opt = None
    full_learner_text = learner_log.read_text(errors="replace")
    hz = [float(x) for x in re.findall(r"Optimization frequency loop \[Hz\]: ([0-9.eE+-]+)", full_learner_text)]
    n_updates_logged = len(hz)  # one line per optimization step
    for line in ltail.new_lines() + [ltail.buf]:
        m = OPT_RE.search(line)
        if m:
            opt_steps.append({"opt_step": int(m.group(1)), "t": round(t_stop - t_actor_start, 2)})
    final_opt = n_updates_logged
    ckpts = re.findall(r"Checkpoint policy after step (\d+)", full_learner_text)

    env_steps_done = episodes[-1]["step"] if episodes else 0
    actor_text = actor_log.read_text(errors="replace")
    # the learner's own log of loading the demonstrations into its offline buffer (tqdm counts the transitions)
    offline_lines = [ln.strip() for ln in full_learner_text.splitlines() if any(m in ln for m in OFFLINE_LOG_MARKERS)]
    i_convert = full_learner_text.find(OFFLINE_LOG_MARKERS[1])
    m_total = TQDM_TOTAL_RE.search(full_learner_text, i_convert) if i_convert >= 0 else None
    return {
        "port": port,
        "learner_cmd": learner_cmd,
        "actor_cmd": actor_cmd,
        "stopped_by": stopped_by,
        "rc_actor": rc_actor,
        "rc_learner": rc_learner,
        "learner_startup_s": round(t_learner_ready - t0, 1),
        "train_wall_s": round(t_stop - t_actor_start, 1),
        "total_wall_s_incl_startup_and_shutdown": round(time.time() - t0, 1),
        "env_steps_in_completed_episodes": env_steps_done,
        "episodes": episodes,
        "opt_steps": opt_steps,
        "learner_optimization_steps": final_opt,
        "checkpoints_saved_at_opt_step": [int(c) for c in ckpts],
        "learner_offline_buffer_log": offline_lines,
        "learner_offline_buffer_transitions": int(m_total.group(2)) if m_total else None,
        "learner_hz_median": sorted(hz)[len(hz) // 2] if hz else None,
        "actor_policy_fps_warnings": actor_text.count("below required"),
        "hub_download_mentions": sum(
            t.count("huggingface.co") + t.count("HF_HUB_OFFLINE") + t.count("LocalEntryNotFoundError")
            for t in (actor_text, full_learner_text)
        ),
        "torchcodec_errors": sum(
            t.count("torchcodec' is installed but cannot be loaded") for t in (actor_text, full_learner_text)
        ),
    }


def training_curve(episodes: list[dict], window: int = 20) -> dict:
    succ = [e["success"] for e in episodes]
    first_08 = None
    rolling = []
    for i in range(len(succ)):
        w = succ[max(0, i - window + 1) : i + 1]
        r = sum(w) / len(w)
        rolling.append(r)
        if first_08 is None and len(w) == window and r >= 0.8:
            first_08 = episodes[i]["step"]
    by_k = {}
    for e in episodes:
        b = (e["step"] - 1) // 1000
        d = by_k.setdefault(b, [0, 0])
        d[0] += e["success"]
        d[1] += 1
    return {
        "n_episodes": len(episodes),
        "n_successes": sum(succ),
        "last20_success": (sum(succ[-window:]) / len(succ[-window:])) if succ else None,
        "first_env_step_rolling20_ge_0.8": first_08,
        "first_success_env_step": next((e["step"] for e in episodes if e["success"]), None),
        "success_per_1k_env_steps": {f"{b * 1000}-{(b + 1) * 1000}": f"{v[0]}/{v[1]}" for b, v in sorted(by_k.items())},
        "mean_episode_len_last20": (
            (episodes[-1]["step"] - episodes[-21]["step"]) / 20 if len(episodes) > 20 else None
        ),
    }


def evaluate_into(summary: dict, last: Path, out: Path, args) -> None:
    """Evaluate the learner's last checkpoint and record it (and the time it took) in `summary`."""
    ckpt = last.resolve()
    summary["eval_checkpoint"] = str(ckpt.relative_to(REPO) if ckpt.is_relative_to(REPO) else ckpt)
    t = time.time()
    summary["eval"] = evaluate(last, out / "learner_config.json", args.eval_episodes, args.eval_seed0, args.overrides)
    summary["eval_wall_s"] = round(time.time() - t, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--env-steps", type=int, default=10_000)
    ap.add_argument("--save-freq", type=int, default=500, help="learner checkpoint period, optimization steps")
    ap.add_argument("--max-wall", type=float, default=45 * 60, help="stop training after this many seconds")
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--eval-seed0", type=int, default=1_000_000)
    ap.add_argument("--tag", default="")
    ap.add_argument(
        "--demos",
        type=int,
        default=0,
        help="record N successful scripted-expert episodes as a LeRobot dataset (OUT/demos) and mix it "
        "50/50 into the learner's batches (0: online only)",
    )
    ap.add_argument(
        "--demo-seed",
        type=int,
        default=100_000,
        help="block seed of demo attempt i = demo_seed + i (our learner's demos.seed default)",
    )
    ap.add_argument(
        "--stock-env",
        action="store_true",
        help="LeRobot's stock gym_hil env (cameras rendered, fixed block, no block position in the state)",
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--eval-only", action="store_true", help="skip training; evaluate --out's last checkpoint")
    args = ap.parse_args()
    args.overrides = {} if args.stock_env else dict(TASK_OVERRIDES)

    out = args.out or HERE / "runs" / (f"seed{args.seed}" + (f"_{args.tag}" if args.tag else ""))
    last = out / "learner" / "checkpoints" / "last" / "pretrained_model"
    if args.eval_only:
        summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
        evaluate_into(summary, last, out, args)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        return
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty; pick another --tag/--out")
    out.mkdir(parents=True, exist_ok=True)

    demos = record(args, out)
    tr = train(args, out, demos)
    curve = training_curve(tr["episodes"])
    n_up = tr["learner_optimization_steps"] or 0
    steps = tr["env_steps_in_completed_episodes"]
    summary = {
        "seed": args.seed,
        "env_step_budget": args.env_steps,
        "gym_hil_overrides": args.overrides,
        "demos": args.demos,
        "online_ratio": json.loads((out / "learner_config.json").read_text())["online_ratio"],
        **({"demo_recording": {k: v for k, v in demos.items() if k != "outcomes"}} if demos else {}),
        **{k: v for k, v in tr.items() if k not in ("episodes", "opt_steps")},
        "env_steps_per_s": round(steps / tr["train_wall_s"], 2) if tr["train_wall_s"] else None,
        "env_steps_per_s_after_first_episode": (
            round((steps - tr["episodes"][0]["step"]) / (tr["episodes"][-1]["t"] - tr["episodes"][0]["t"]), 2)
            if len(tr["episodes"]) > 1 and tr["episodes"][-1]["t"] > tr["episodes"][0]["t"]
            else None
        ),
        "actor_first_episode_done_at_s": tr["episodes"][0]["t"] if tr["episodes"] else None,
        "updates_per_s": round(n_up / tr["train_wall_s"], 2) if tr["train_wall_s"] else None,
        "utd_realised_opt_steps_per_env_step": round(n_up / steps, 3) if steps else None,
        "utd_realised_critic_updates_per_env_step": round(2 * n_up / steps, 3) if steps else None,
        "training": curve,
    }
    (out / "progress.json").write_text(json.dumps({"episodes": tr["episodes"], "opt_steps": tr["opt_steps"]}, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "training"}, indent=1), flush=True)
    print(json.dumps(curve, indent=1), flush=True)

    (out / "summary.json").write_text(json.dumps(summary, indent=1))  # the training part, should the eval fail
    if args.eval_episodes > 0 and last.exists():
        evaluate_into(summary, last, out, args)
    elif args.eval_episodes > 0:
        summary["eval"] = f"no checkpoint at {last}"
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"[run] wrote {out / 'summary.json'}", flush=True)


if __name__ == "__main__":
    main()
