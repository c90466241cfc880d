"""The person who checks the learned reward during bench/unattended.py (issue 52: live reward-model checks).

Every so often the simulated person looks over what the run recorded since the last look, the way a person scrolls
the page's score trace beside the camera: each frame where the model's success probability crossed its threshold
while the simulator's own check says no is a false success, each frame the simulator calls a success while the model
stayed below is a missed one. A person marks a few of each (at most `max_marks` a look, the frames before each
mistake, as the page's F / M keys do: `robo_rl.rewards.live.save_mark`), and when there are marks `robo-rl reward
retrain <run>` fits the next model version on the model's own training data plus every mark; the running actors swap
it in between two steps. The simulator's check is only this person's eyes: the run itself never reads it for reward.

Each look is reported: frames looked at, the model's frame false-positive and false-negative rates on them (so the
model's agreement with the truth can be followed over the run), the marks saved and the version published.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of True in `mask`, end exclusive."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def disagreements(success: np.ndarray, prob: np.ndarray, threshold: float, episode: np.ndarray) -> dict:
    """Where a model's frames disagree with the truth: {"false_success": [(start, end)], "missed_success": [...]} over
    runs of frames within one episode, and the frame rates. Frames without a score (prob < 0) are left out."""
    scored = prob >= 0
    said, truth = (prob >= threshold) & scored, success.astype(bool) & scored
    out: dict = {"frames": int(scored.sum())}
    for label, mask in (("false_success", said & ~truth), ("missed_success", truth & ~said)):
        # a run never spans two episodes: split where the episode changes
        spans = []
        for start, end in _runs(mask):
            cuts = [start, *(start + 1 + np.flatnonzero(np.diff(episode[start:end]))).tolist(), end]
            spans += [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
        out[label] = spans
    negatives, positives = int((scored & ~truth).sum()), int(truth.sum())
    out["frame_fpr"] = float((said & ~truth).sum() / negatives) if negatives else None
    out["frame_fnr"] = float((truth & ~said).sum() / positives) if positives else None
    return out


class Reviewer:
    """Looks at the segments written since its last look; marks mistakes; retrains when it marked any."""

    def __init__(
        self,
        folder: Path,
        cameras: list[str],
        max_marks: int = 6,
        retrain_epochs: int = 10,
        retrain_nice: int = 10,
        mark_share: float | None = None,
    ) -> None:
        """`retrain_nice`: the retrain's CPU niceness (`robo-rl reward retrain`'s default 10 yields to a robot's
        control loops; a simulated run's actor is the simulator itself, which it then waits behind). `mark_share`:
        the retrain's `mark_share` (None: its default)."""
        self.folder, self.cameras = Path(folder), list(cameras)
        self.max_marks, self.retrain_epochs, self.retrain_nice = max_marks, retrain_epochs, retrain_nice
        self.mark_share = mark_share
        self.seen: set[str] = set()
        self.looks: list[dict] = []
        self._retrain: tuple[subprocess.Popen, float, dict, Path] | None = None  # running: (process, start, look, log)

    def _threshold(self) -> float:
        from robo_rl.rewards.base import load_model
        from robo_rl.rewards.live import current_model, run_model_path

        current = current_model(self.folder)
        model = load_model(current[1] if current else run_model_path(self.folder))
        return float(model.threshold)

    def _new_records(self) -> dict | None:
        """The scalars of every record written since the last look, read whole, and the camera frames as memory maps
        (read from disk only for the spans a person marks: a look must not stall the machine reading every frame)."""
        from robo_rl.data.storage import SegmentStore

        store = SegmentStore.open(self.folder / "replay" / "online")
        keys = ["success", "episode_id", "extra/success_prob", "extra/reward_model_version"]
        parts = []
        for seg in list(store.segments):
            if seg.name in self.seen:
                continue
            batch, _ = store.read(seg, verify=False, mmap=True)
            self.seen.add(seg.name)
            parts.append(batch)
        if not parts:
            return None
        out: dict = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in keys}
        out["_frames"] = [(len(p["success"]), {c: p[f"image/{c}"] for c in self.cameras}) for p in parts]
        return out

    @staticmethod
    def _frames(records: dict, lo: int, end: int) -> dict[str, np.ndarray]:
        """Camera frames [lo, end) across the segments read in one look."""
        pieces: dict[str, list[np.ndarray]] = {}
        offset = 0
        for length, images in records["_frames"]:
            a, b = max(lo - offset, 0), min(end - offset, length)
            if b > a:
                for c, frames in images.items():
                    pieces.setdefault(c, []).append(np.array(frames[a:b]))
            offset += length
        return {c: np.concatenate(v) for c, v in pieces.items()}

    def poll(self) -> bool:
        """Whether no retrain is running (a finished one's outcome is written into the look that started it)."""
        if self._retrain is None:
            return True
        proc, start, look, log = self._retrain
        if proc.poll() is None:
            return False
        said = log.read_text().strip().splitlines() if log.is_file() else []
        # the retrain's own time: to its log's last line (its end), not to this poll (measured to the next look's poll
        # until c64bfb1, every retrain looked 15 minutes long: bench/results/unattended_2h_every_fix.json)
        ended = log.stat().st_mtime if log.is_file() and said else time.time()
        look["retrain"] = {
            "exit_code": proc.returncode,
            "wall_s": round(max(0.0, ended - start), 1),
            "said": said[-2:],
        }
        self._retrain = None
        return True

    def finish(self, timeout_s: float = 1800) -> None:
        """Wait for a running retrain (the run is ending)."""
        if self._retrain is not None:
            try:
                self._retrain[0].wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._retrain[0].kill()
                self._retrain[0].wait()
            self.poll()

    def look(self, t_s: float) -> dict:
        """One look (the retrain it starts runs in the background: the bench goes on sampling); none while the last
        look's retrain is still running."""
        from robo_rl.rewards.live import MARK_FRAMES, save_mark

        if not self.poll():
            look = {"t_s": round(t_s, 1), "skipped": "the last retrain is still running"}
            self.looks.append(look)
            return look
        records, look = self._new_records(), {"t_s": round(t_s, 1)}
        if records is None:
            look["frames"] = 0
            self.looks.append(look)
            return look
        threshold = self._threshold()
        n = len(records["success"])
        found = disagreements(
            records["success"].reshape(n),
            records["extra/success_prob"].reshape(n),
            threshold,
            records["episode_id"].reshape(n),
        )
        versions = np.unique(records["extra/reward_model_version"]).tolist()
        look.update(
            frames=found["frames"],
            threshold=threshold,
            model_versions_seen=versions,
            frame_fpr=found["frame_fpr"],
            frame_fnr=found["frame_fnr"],
            false_success_spans=len(found["false_success"]),
            missed_success_spans=len(found["missed_success"]),
        )
        # a person marks a few of each kind, newest first (what the page showed last)
        marked = {"false_success": 0, "missed_success": 0}
        spans = [(label, s) for label in marked for s in reversed(found[label])]
        spans.sort(key=lambda x: -x[1][1])
        for label, (start, end) in spans[: self.max_marks]:
            lo = max(start, end - MARK_FRAMES)
            frames = self._frames(records, lo, end)
            meta = {"by": "bench/unattended.py reviewer", "t_s": look["t_s"], "frames": [lo, end]}
            save_mark(self.folder, "actor-0", label, frames, meta)
            marked[label] += 1
        look["marked"] = marked
        if sum(marked.values()):
            cmd = [sys.executable, "-m", "robo_rl.cli", "reward", "retrain", str(self.folder)]
            log = self.folder / "reward" / f"retrain_{len(self.looks)}.log"
            # in a session of its own: its niceness then lowers its group's CPU share against the actors' sessions,
            # not only its share within the bench's. Not own_session(): its SIGTERM when the starting *thread* ends
            # would stop the retrain as soon as this look's thread returns (every retrain of a run at c5df7ff did so)
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    [
                        *cmd,
                        f"epochs={self.retrain_epochs}",
                        f"nice={self.retrain_nice}",
                        *([f"mark_share={self.mark_share}"] if self.mark_share is not None else []),
                    ],
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._retrain = (proc, time.time(), look, log)
        self.looks.append(look)
        return look


def summarize(looks: list[dict]) -> dict:
    """Marks and retrains over the run, and the model's frame error rates at the first and the last look."""
    scored = [x for x in looks if x.get("frames")]
    marks = sum(sum(x.get("marked", {}).values()) for x in looks)
    retrains = [x["retrain"] for x in looks if "retrain" in x]
    return {
        "looks": len(looks),
        "marks": marks,
        "retrains": len(retrains),
        "retrains_failed": sum(r["exit_code"] != 0 for r in retrains),
        "retrain_wall_s": [r["wall_s"] for r in retrains],
        "first_look": {k: scored[0].get(k) for k in ("t_s", "frame_fpr", "frame_fnr")} if scored else None,
        "last_look": {k: scored[-1].get(k) for k in ("t_s", "frame_fpr", "frame_fnr")} if scored else None,
        "versions_seen_last": scored[-1].get("model_versions_seen") if scored else None,
    }


if __name__ == "__main__":  # look once at a run folder: python bench/_unattended_review.py <run> [cameras...]
    print(json.dumps(Reviewer(Path(sys.argv[1]), sys.argv[2:] or ["front", "wrist"]).look(0.0), default=str))
