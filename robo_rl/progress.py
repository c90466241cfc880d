"""The `train` progress bar: shown from the first second with its total, continued across `resume=`, and an
ETA from the recent rate of training proper (the fast, update-free start would promise an early finish)."""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

from robo_rl.configs.settings import unused_rollout_note

ETA_WINDOW_S = 120.0  # the rate behind the ETA: env steps over about this much recent time
ETA_MIN_SPAN_S = 10.0  # no ETA before this much time of training proper has been seen
FALLBACK_COLUMNS, FALLBACK_ROWS = 100, 24  # the bar's terminal size where the terminal reports 0 (a fresh pty)


def terminal_size_args(stream) -> dict:
    """tqdm's size arguments for a bar on `stream`: follow the terminal's width, except where it reports 0 columns
    or rows (tqdm then draws nothing at all): a fixed size then."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a terminal: tqdm's own default
        return {"dynamic_ncols": True}
    if size.columns and size.lines:
        return {"dynamic_ncols": True}
    return {"ncols": size.columns or FALLBACK_COLUMNS, "nrows": size.lines or FALLBACK_ROWS}


def resumed_env_steps(run_dir: str | Path | None) -> int:
    """The env steps a run folder has already trained (its last metrics line that counts them), 0 if none."""
    path = Path(run_dir) / "metrics.jsonl" if run_dir else None
    steps = 0
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a kill
            if isinstance(m, dict) and isinstance(m.get("env_steps"), int):
                steps = max(steps, m["env_steps"])
    return steps


class EtaEstimator:
    """Seconds left from the env-step rate over the last `window_s` seconds at or past `steady_from` steps."""

    def __init__(
        self, total: int, steady_from: int, window_s: float = ETA_WINDOW_S, min_span_s: float = ETA_MIN_SPAN_S
    ) -> None:
        self.total, self.steady_from = total, steady_from
        self.window_s, self.min_span_s = window_s, min_span_s
        self.samples: collections.deque[tuple[float, int]] = collections.deque()

    def update(self, env_steps: int, now: float | None = None) -> None:
        if env_steps < self.steady_from:
            return
        now = time.monotonic() if now is None else now
        self.samples.append((now, env_steps))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window_s:
            self.samples.popleft()

    def seconds_left(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        if t1 - t0 < self.min_span_s or s1 <= s0:
            return None
        return max(0, self.total - s1) / ((s1 - s0) / (t1 - t0))


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def paused_actors(m: dict) -> dict[str, str]:
    """Actor -> why it is paused, from a learner metrics line's `actor_stats` (the actors' heartbeats)."""
    stats = m.get("actor_stats")
    if not isinstance(stats, dict):
        return {}
    return {
        actor: str(s.get("paused_why") or "paused")
        for actor, s in stats.items()
        if isinstance(s, dict) and s.get("paused") is True
    }


class TrainingBar:
    """One bar for a whole `train` run: start-up phases in its description, env steps from the learner's
    metrics lines, and `EtaEstimator`'s time left in place of tqdm's (which averages in the start-up)."""

    def __init__(self, cfg, run_dir: Path | None, enabled: bool = True) -> None:
        from tqdm import tqdm

        train = cfg.train
        self.start = resumed_env_steps(cfg.get("resume"))
        self.total = int(train.total_env_steps)
        self.env_steps = min(self.start, self.total)  # kept here: a disabled tqdm counts nothing
        self.eta = EtaEstimator(train.total_env_steps, self.start + train.learning_starts)
        layout = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"  # tqdm's ETA left out
        self.bar = tqdm(
            total=self.total,
            initial=self.env_steps,
            unit="step",
            desc="starting",
            disable=not enabled,
            bar_format=layout,
            **terminal_size_args(sys.stderr),
        )
        self.bar.set_postfix_str("ETA ?")
        self.postfix, self.paused_note = "", ""
        gui = cfg.get("gui") or {}
        self.resume_hint = (
            f"resume: Resume on the page, http://{gui.get('host')}:{gui.get('port')}/"
            if gui.get("enabled")
            else "resume: press pause again on the device"
        )
        rollout = cfg.get("algo", {}).get("rollout_env_steps")
        if rollout and (note := unused_rollout_note(self.total, int(rollout))):
            self.bar.write(f"warning: {note}")  # before any work: the user may stop and rerun

    def phase(self, text: str) -> None:
        self.bar.set_description_str(text)

    def learner_line(self, m: dict) -> None:
        """Take one `kind: learner` metrics line."""
        steps = min(int(m["env_steps"]), self.total)
        self.bar.update(steps - self.env_steps)
        self.env_steps = steps
        paused = paused_actors(m)
        note = "; ".join(f"{actor} paused: {why}" for actor, why in paused.items())
        if note != self.paused_note:  # said once in the scrollback too (a disabled or redirected bar shows nothing)
            self.bar.write(f"PAUSED: {note}; {self.resume_hint}" if note else "resumed")
            self.paused_note = note
        if paused and len(paused) >= len(m.get("actor_stats") or {}):  # nothing trains until someone resumes
            self.phase("PAUSED")
            self.bar.set_postfix_str(f"{note}; {self.resume_hint}")
            self.eta.samples.clear()  # the ETA starts afresh from the rate after the resume
            return
        self.eta.update(steps)
        self.phase("training" if steps >= self.eta.steady_from else "filling the replay")
        fields = [f"episodes={m.get('episodes')}"] + ([note] if note else [])
        for key, fmt in (
            ("success_rate", "success={:.2f}"),
            ("updates_per_s", "updates/s={:.0f}"),
            ("realised_utd", "utd={:.2f}"),
        ):
            if isinstance(m.get(key), (int, float)):
                fields.append(fmt.format(m[key]))
        self.postfix = ", ".join(fields)
        self.bar.set_postfix_str(f"ETA {format_eta(self.eta.seconds_left())}, {self.postfix}")

    def finish(self, done: bool) -> None:
        if done:
            self.bar.update(self.total - self.env_steps)
            self.env_steps = self.total
        self.bar.close()
