"""The pieces of bench/unattended.py that read a run folder and judge it: a sample of metrics.jsonl, the record check
(what the actors sent against the replay on disk) and the verdicts against issue 52's targets. Kept apart so that
tests/test_bench_unattended.py checks them on hand-made inputs, without starting a run.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from robo_rl.eval.wilson import wilson_interval
from robo_rl.loop_timing import LATE_PARTS

# the targets
CALLS_PER_HOUR_MAX = 2.0
MEMORY_GROWTH_PER_HOUR_MAX = 0.05
JITTER_CHANGE_MAX = 0.20
SUCCESS_LAST_EPISODES = 50  # "success at the end": the last this many episodes' success


# --- reading a run folder -------------------------------------------------------------------------------------------
def read_metrics(path: Path) -> tuple[list[dict], dict, dict]:
    """The run's episode records, the newest actor stats per actor (from learner/end records) and the newest learner
    record in metrics.jsonl. A half-written last line (the learner is appending) is skipped."""
    episodes, actors, learner = [], {}, {}
    if not path.exists():
        return episodes, actors, learner
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "episode":
            episodes.append(record)
            continue
        if record.get("kind") == "learner":
            learner = record
        if record.get("actor_stats"):
            actors.update(record["actor_stats"])
    return episodes, actors, learner


def metrics_sample(path: Path) -> dict:
    """What a person would ask of a run at one moment, from its metrics.jsonl: totals so far, summed over actors, and
    the learner's updates and the update-to-data ratio it reached (a learner below real-time actors' priority does
    what updates the cores leave it)."""
    episodes, actors, learner = read_metrics(path)
    stats = list(actors.values())

    def total(key: str) -> int:
        return int(sum(s.get(key, 0) for s in stats))

    # the heartbeat's figures cover the actor's last 2,000 control periods, the gaps over between-episode resets too
    jitter = [s["jitter_ms_p99"] for s in stats if "jitter_ms_p99" in s]
    median = [s["jitter_ms_p50"] for s in stats if "jitter_ms_p50" in s]
    worst = max((s for s in stats if "jitter_ms_p99" in s), key=lambda s: s["jitter_ms_p99"], default={})
    return {
        "episodes": len(episodes),
        "successes": int(sum(bool(e.get("success")) for e in episodes)),
        "reset_calls": total("reset_calls"),
        "resets": total("resets"),
        "resets_failed": total("resets_failed"),
        "interventions": total("human_takeovers"),
        "safety_stops": total("safety_stops"),
        "jitter_ms_p99": max(jitter) if jitter else None,
        "jitter_ms_p50": max(median) if median else None,
        # where that actor's slowest 1% of periods went, ms (robo_rl/loop_timing.py late_period_parts)
        "late_ms": {p: worst[f"late_{p}_ms"] for p in LATE_PARTS if f"late_{p}_ms" in worst},
        "sent_records": total("sent_records"),
        "paused": any(s.get("paused") for s in stats),
        "waiting_why": next((s["reset_waiting_why"] for s in stats if "reset_waiting_why" in s), None),
        "updates": learner.get("updates"),
        "realised_utd": learner.get("realised_utd"),
    }


def disk_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def machine_sample(t_s: float) -> dict:
    """What else used the CPU: the 1-minute load, and the CPU seconds so far of this bench's own process, of the
    browser, and of its other children (the simulated person's reward-model retrains)."""
    import psutil

    me = psutil.Process()
    cpu = {"bench": sum(me.cpu_times()[:2]), "browser": 0.0, "retrain": 0.0}
    for child in me.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            who = "browser" if "chrom" in child.name().lower() else "retrain" if " retrain " in cmd else None
            if who:
                cpu[who] += sum(child.cpu_times()[:2])
        except psutil.Error:  # ended while listed
            pass
    return {"t_s": round(t_s, 1), "load_1min": os.getloadavg()[0], "cpu_s": {k: round(v, 1) for k, v in cpu.items()}}


def record_check(folder: Path) -> dict:
    """Every record the actors sent against the replay on disk: `lost` = sent − stored (0: nothing lost), every
    finished episode of metrics.jsonl on disk whole (its length + the reset's record), and the actors' own warnings
    of unstored messages. An episode on disk that metrics.jsonl lacks is the one a stop cut short (sent, stored)."""
    from robo_rl.data.storage import SegmentStore

    store = SegmentStore.open(folder / "replay" / "online")
    per_episode: dict[int, int] = {}
    for _, batch, _ in store.iter_segments():
        ids, counts = np.unique(batch["episode_id"], return_counts=True)
        for i, n in zip(ids.tolist(), counts.tolist(), strict=True):
            per_episode[i] = per_episode.get(i, 0) + n
    stored = sum(per_episode.values())
    episodes, _, _ = read_metrics(folder / "metrics.jsonl")
    missing = [e["episode_id"] for e in episodes if e["episode_id"] not in per_episode]
    partial = [e["episode_id"] for e in episodes if per_episode.get(e["episode_id"], 0) not in (0, e["length"] + 1)]
    sent, unstored = None, 0
    for log in folder.glob("actor*.log"):
        text = log.read_text(errors="replace")
        said = re.findall(r"sent (\d+) records in all", text)
        sent = (sent or 0) + int(said[-1]) if said else sent
        unstored += sum(int(n) for n in re.findall(r"(\d+) messages \(\d+ env steps\) were never confirmed", text))
    return {
        "records_sent": sent,
        "records_stored": stored,
        "lost": None if sent is None else sent - stored,
        "episodes_logged": len(episodes),
        "episodes_on_disk": len(per_episode),
        "episodes_missing": len(missing),
        "episodes_partial": len(partial),
        "messages_never_confirmed": unstored,
        "corrupt_segments": len(store.problems),
    }


SAME_FRAME_MEAN_ABS = 0.1  # two first frames closer than this (mean absolute difference, 0-255) show the same scene
SAME_STATE_MAX_ABS = 1e-3  # without cameras: two start states this close


def repeated_starts(folder: Path) -> dict:
    """How often an episode started from the very scene the one before it started from: the first camera frames (or,
    with no camera, the states) of consecutive episodes in the replay compared. A reset that leaves a failed scene
    as it was hands the policy the same start again and again (the 40-minute run of 2026-11-30: 20+ in a row)."""
    from robo_rl.data.storage import SegmentStore

    firsts = []
    for _, batch, _ in SegmentStore.open(folder / "replay" / "online").iter_segments(mmap=True):
        images = sorted(k for k in batch if k.startswith("image/"))
        key = images[0] if images else "state"
        firsts += [np.asarray(batch[key][i], np.float32) for i in np.flatnonzero(np.asarray(batch["step"]) == 0)]
    same, longest, run = 0, 0, 0
    for before, after in zip(firsts, firsts[1:], strict=False):
        diff = np.abs(after - before)
        same_scene = diff.mean() < SAME_FRAME_MEAN_ABS if after.ndim == 3 else diff.max() < SAME_STATE_MAX_ABS
        if same_scene:
            same, run = same + 1, run + 1
            longest = max(longest, run)
        else:
            run = 0
    return {"episodes": len(firsts), "same_as_previous": same, "longest_streak": longest}


CALLS_LISTED = 100  # the calls' own words, kept in the result up to this many
RESET_CALL_LINE = re.compile(r"reset call (\d+) \((\w+) answers\): (.+)$")


def reset_call_reasons(folder: Path) -> dict:
    """Why the reset check called a person: every "reset call" line of the run's actor logs (a resumed run appends to
    them), each problem it names counted with its figures masked ("the cube is N cm outside its start region")."""
    calls, reasons, said = 0, {}, []
    for log in sorted(folder.glob("actor*.log")):
        for line in log.read_text(errors="replace").splitlines():
            found = RESET_CALL_LINE.search(line)
            if found is None:
                continue
            calls += 1
            said.append(found[3][:300])
            for problem in found[3].split("; "):
                kind = re.sub(r"-?\d+(\.\d+)?", "N", problem.strip())
                reasons[kind] = reasons.get(kind, 0) + 1
    reasons = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return {"calls": calls, "reasons": reasons, "first_calls": said[:CALLS_LISTED]}


# --- verdicts --------------------------------------------------------------------------------------------------------
def _at(samples: list[dict], t_s: float) -> dict:
    """The first sample at or after `t_s` (the last one if none is)."""
    return next((s for s in samples if s["t_s"] >= t_s), samples[-1])


def calls_per_hour(samples: list[dict], warmup_s: float) -> float | None:
    """Human calls (reset calls + takeovers) per hour from the end of the warm-up to the last sample."""
    start, end = _at(samples, warmup_s), samples[-1]
    hours = (end["t_s"] - start["t_s"]) / 3600
    calls = lambda s: s["reset_calls"] + s["interventions"]  # noqa: E731
    return None if hours <= 0 else (calls(end) - calls(start)) / hours


def memory_growth_per_hour(times_s: list[float], rss_mb: list[float], warmup_s: float) -> float | None:
    """The least-squares slope of resident memory after the warm-up, per hour, as a share of the memory then."""
    t, m = np.asarray(times_s, float), np.asarray(rss_mb, float)
    keep = (t >= warmup_s) & np.isfinite(m)
    if keep.sum() < 3:
        return None
    slope_per_s = np.polyfit(t[keep], m[keep], 1)[0]
    return float(slope_per_s * 3600 / m[keep][0])


def jitter_change(samples: list[dict], window_s: float) -> float | None:
    """The median of the sampled jitter p99 over the last window against the first window's, as (last/first − 1)."""
    timed = [(s["t_s"], s["jitter_ms_p99"]) for s in samples if s.get("jitter_ms_p99") is not None]
    if len(timed) < 2:
        return None
    t0, t1 = timed[0][0], timed[-1][0]
    first = [j for t, j in timed if t <= t0 + window_s]
    last = [j for t, j in timed if t >= t1 - window_s]
    return float(np.median(last) / max(np.median(first), 1e-9) - 1)


def over_time(samples: list[dict], bin_s: float) -> list[dict]:
    """Per `bin_s` of the run: episodes, successes and their rate, human calls, and the jitter p99 and disk at the bin's
    end (the report's "successes per hour over time")."""
    out, start = [], {"t_s": 0.0, "episodes": 0, "successes": 0, "reset_calls": 0, "interventions": 0}
    for edge in np.arange(bin_s, samples[-1]["t_s"] + bin_s, bin_s) if samples else []:
        inside = [s for s in samples if s["t_s"] <= edge + 1e-6]
        if not inside or inside[-1] is start:
            continue
        end = inside[-1]
        episodes, successes = end["episodes"] - start["episodes"], end["successes"] - start["successes"]
        calls = end["reset_calls"] + end["interventions"] - start["reset_calls"] - start["interventions"]
        out.append(
            {
                "t_s": end["t_s"],
                "episodes": episodes,
                "successes": successes,
                "success_rate": successes / episodes if episodes else None,
                "human_calls": calls,
                "jitter_ms_p99": end.get("jitter_ms_p99"),
                "disk_mb": end.get("disk_mb"),
            }
        )
        start = end
    return out


def disk_growth_mb_per_hour(samples: list[dict], warmup_s: float) -> float | None:
    """The run folder's growth after the warm-up, MB per hour (least squares)."""
    t = np.array([s["t_s"] for s in samples if s["t_s"] >= warmup_s and s.get("disk_mb") is not None], float)
    mb = np.array([s["disk_mb"] for s in samples if s["t_s"] >= warmup_s and s.get("disk_mb") is not None], float)
    return None if len(t) < 3 else float(np.polyfit(t, mb, 1)[0] * 3600)


def verdicts(samples: list[dict], records: dict, warmup_s: float, window_s: float) -> dict:
    """The issue's targets for one run's samples and record check; a figure that cannot be computed is None."""
    calls = calls_per_hour(samples, warmup_s)
    times = [s["t_s"] for s in samples]
    memory, own = (
        {
            proc: memory_growth_per_hour(times, [s.get(key, {}).get(proc, np.nan) for s in samples], warmup_s)
            for proc in ("learner", "actor")
        }
        for key in ("rss_mb", "anon_mb")
    )
    jitter = jitter_change(samples, window_s)
    rss_met = None if None in memory.values() else all(g <= MEMORY_GROWTH_PER_HOUR_MAX for g in memory.values())
    own_met = None if None in own.values() else all(g <= MEMORY_GROWTH_PER_HOUR_MAX for g in own.values())
    return {
        "human_calls_per_hour_after_warmup": calls,
        "calls_met": None if calls is None else calls <= CALLS_PER_HOUR_MAX,
        "memory_growth_per_hour": memory,
        "anon_memory_growth_per_hour": own,
        # a leak shows in the process's own memory; RSS also counts the disk replay's page cache (both reported)
        "memory_met": own_met if own_met is not None else rss_met,
        "rss_memory_met": rss_met,
        "jitter_p99_change_last_vs_first": jitter,
        "jitter_met": None if jitter is None else jitter <= JITTER_CHANGE_MAX,
        "disk_growth_mb_per_hour": disk_growth_mb_per_hour(samples, warmup_s),
        "records_lost": records.get("lost"),
        "lost_met": records.get("lost") == 0 and records["episodes_missing"] == 0 and records["episodes_partial"] == 0,
    }


def success_at_end(folder: Path, last: int = SUCCESS_LAST_EPISODES) -> dict:
    """The success of the last `last` episodes, and of those among them the (simulated) human never touched."""
    episodes, _, _ = read_metrics(folder / "metrics.jsonl")
    tail = episodes[-last:]
    alone = [e for e in tail if not e.get("intervention_steps")]
    wins = sum(bool(e.get("success")) for e in tail)
    return {
        "episodes": len(tail),
        "success": float(np.mean([bool(e.get("success")) for e in tail])) if tail else None,
        "wilson_95": list(wilson_interval(wins, len(tail))) if tail else None,
        "unassisted_episodes": len(alone),
        "unassisted_success": float(np.mean([bool(e.get("success")) for e in alone])) if alone else None,
    }
