"""The learner's replay: partitions, persistence on disk, and exact restore on resume.

Partitions: `online` (every record the actors send), `demos` (prior demonstrations) and
`interventions` (online transitions a human took over, a view of the online rows, indexed as they are
written, so sampling it never scans the ring). A batch takes `online_fraction` from online and the rest from
the prior data, demos and interventions pooled; `last_prior_rows` says how many prior rows the last batch took.

The WSRL warm-up (`warmup_episodes` K > 0) is counted here, on every online record as it is added and again as a
resume re-adds the stored ones in their order: `warmup_steps` is None until the K-th online episode has ended, then
the online env steps up to its last record (the schedule owes no update before it, and counts its UTD from it).

Every online record is also written to `<run>/replay/online/` (see `storage.py`) in arrival order, by
a background thread, at most `flush_every_s` after it arrived. Only then is it acknowledged to the
actor, which keeps (and after a learner restart resends) what is not acknowledged: a kill -9 of the
learner loses nothing. A checkpoint flushes first and names the manifest and segment count it goes
with; restoring re-adds the segments in order, which rebuilds the RAM ring row for row.

The run's task table (`tasks.py`) lives here: each batch's own instructions are mapped into it as the batch
arrives, and it is written beside the segments (`tasks.json`) before any record that indexes a new entry.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from robo_rl.data.replay import DiskReplay, ReplayBuffer, concat_batches
from robo_rl.data.schema import check_step_batch
from robo_rl.data.storage import SegmentStore, SegmentWriter, record_nbytes
from robo_rl.data.tasks import TaskTable, unpack_instructions

log = logging.getLogger(__name__)


def online_store_root(run_dir: str | Path) -> Path:
    """Where a run folder keeps its online replay."""
    return Path(run_dir) / "replay" / "online"


def _mb(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MB"


class LearnerReplay:
    def __init__(
        self,
        cfg: DictConfig,
        fields: dict[str, tuple],
        run_dir: Path,
        demos: dict | None,
        total_env_steps: int = 0,
        rejected_takeovers: bool = False,
    ) -> None:
        self.cfg = cfg
        self.rejected_takeovers = rejected_takeovers  # RLIF: a takeover's penalty is on the policy's rejected action
        self.fields = fields
        if cfg.storage not in ("ram", "disk"):
            raise ValueError(f"replay.storage must be 'ram' or 'disk', got '{cfg.storage}'")
        if cfg.storage == "disk" and not cfg.persist:
            raise ValueError("replay.storage=disk samples from the segment files: it needs replay.persist=true")
        self.disk = cfg.storage == "disk"
        self.online = DiskReplay(cfg.disk_capacity, fields) if self.disk else ReplayBuffer(cfg.capacity, fields)
        self.store = SegmentStore(online_store_root(run_dir), fields) if cfg.persist else None
        self.tasks = TaskTable(self.store.tasks if self.store else None)  # a resumed run's, before the demos add any
        self.online.instructions = self.tasks.names  # the same list: samples name each row's instruction
        self.demos = None
        if demos is not None and len(demos["step"]):
            demos = dict(demos)
            demos.pop("instruction", None)  # each record's, for `relabel_prior`: the table's codes say it
            unpack_instructions(demos, self.tasks)
            self._save_tasks()
            self.demos = ReplayBuffer(len(demos["step"]), fields)
            self.demos.instructions = self.tasks.names
            # recorded without this policy: its extras are zero (an algorithm that needs them recomputes them)
            zero = {
                k: np.zeros((len(demos["step"]), *shape), dtype)
                for k, (shape, dtype) in fields.items()
                if k.startswith("extra/") and k not in demos
            }
            self.demos.add({**demos, **zero}, source="demos")
        self.writer = SegmentWriter(self.store) if self.store else None
        self._pending: list[tuple[str, dict]] = []  # records received and not yet handed to the writer
        self._pending_bytes = 0
        self._seqs: dict[str, list] = {}  # actor → [session, seq] of the newest record received
        self._messages: list[list] = []  # [actor, session, seq, session token hash] of the pending messages
        self.sessions: dict[str, dict] = {}  # after `restore`: actor → its newest stored session (see there)
        self._last_flush = time.monotonic()
        self.total_env_steps = total_env_steps
        self.last_prior_rows = 0  # prior rows (demos, interventions) in the last batch sampled
        self.warmup_episodes = int(cfg.get("warmup_episodes", 0))
        self.online_episodes = self.online_steps = 0  # ended episodes and env steps received (a resume recounts)
        self.warmup_steps: int | None = None if self.warmup_episodes else 0
        if self.warmup_episodes:
            log.info(
                "WSRL warm-up: no update until %d online episodes of the initial policy are in; then batches take "
                "%d%% prior rows (replay.online_fraction=%s)",
                self.warmup_episodes,
                round(100 * (1 - cfg.online_fraction)),
                cfg.online_fraction,
            )

    # --- memory and disk ----------------------------------------------------------------------
    def usage(self) -> str:
        """What the configured capacity will take in RAM and on disk, for the start-up message."""
        per = record_nbytes(self.fields)
        small = record_nbytes({k: v for k, v in self.fields.items() if not k.startswith("image/")})
        links = 40  # uid, prev, next and their uids per row
        if self.disk:
            where = (
                f"sampled from disk, up to {self.cfg.disk_capacity:,} records "
                f"({_mb((small + links) * self.cfg.disk_capacity)} RAM for the small fields)"
            )
        else:
            where = f"RAM ring of {self.cfg.capacity:,} records ({_mb((per + links) * self.cfg.capacity)})"
        demo = f", demos {_mb(self.demos.capacity * per)} RAM" if self.demos else ""
        if self.store:
            disk = f"; disk about {_mb(per * self.total_env_steps)} for {self.total_env_steps:,} env steps"
        else:
            disk = "; not written to disk (replay.persist=false)"
        return f"replay: {per:,} B per record ({per - small:,} B of frames); {where}{demo}{disk}"

    # --- receiving ------------------------------------------------------------------------------
    def add(
        self, actor: str, arrays: dict, session=None, seq: int | None = None, token_hash: str | None = None
    ) -> None:
        """Store a step batch from `actor` (message `seq` of its `session`, with the hash of the session's token,
        kept in the segment so a restarted learner knows the actor process again); raises ValueError, storing
        nothing, if the batch does not fit the declared fields or one of its instructions is not usable text. The
        batch's `task` column is mapped into the run's table in place (later readers of `arrays` see the run's)."""
        unpack_instructions(arrays, self.tasks)
        self._save_tasks()
        if self.disk:
            check_step_batch(arrays, self.fields)  # the ring validates in RAM mode
        else:
            self.online.add(arrays, source=actor)
        self._count_online(arrays)
        arrays = {name: arrays[name] for name in self.fields}  # fields nobody declared are not stored
        if self.store is not None:
            self._pending.append((actor, arrays))
            self._pending_bytes += sum(a.nbytes for a in arrays.values())
            if seq is not None:
                self._seqs[actor] = [session, seq]
                self._messages.append([actor, session, seq, token_hash])

    def _count_online(self, arrays: dict) -> None:
        """Count the online episodes and env steps of records just stored; note where the warm-up's K-th ends."""
        live = np.asarray(arrays["step"]) > 0
        ends = np.flatnonzero(live & (np.asarray(arrays["terminated"]) | np.asarray(arrays["truncated"])))
        if self.warmup_steps is None and self.online_episodes + len(ends) >= self.warmup_episodes:
            last = ends[self.warmup_episodes - self.online_episodes - 1]
            self.warmup_steps = self.online_steps + int(live[: last + 1].sum())
            log.info(
                "WSRL warm-up done: %d online episodes, %d env steps of the initial policy; updates start",
                self.warmup_episodes,
                self.warmup_steps,
            )
        self.online_episodes += len(ends)
        self.online_steps += int(live.sum())

    def _save_tasks(self) -> None:
        """Write the task table when it gained an entry (before the segment of any record that indexes it)."""
        if self.store is not None and len(self.tasks) != len(self.store.tasks):
            self.store.save_tasks(self.tasks.names)

    def poll(self, force: bool = False) -> dict[str, list]:
        """Hand received records to the writer when due; return {actor: [session, seq]} newly on disk."""
        if self.store is None:
            return {}
        now = time.monotonic()
        due = now - self._last_flush >= self.cfg.flush_every_s or self._pending_bytes >= self.cfg.segment_max_mb * 2**20
        if self._pending and (due or force):
            batch = concat_batches([a for _, a in self._pending])
            sources = np.concatenate([np.full(len(a["step"]), actor, dtype=object) for actor, a in self._pending])
            self.writer.submit(batch, sources, {k: list(v) for k, v in self._seqs.items()}, self._messages)
            self._pending, self._pending_bytes, self._messages = [], 0, []
            self._last_flush = now
        durable: dict[str, list] = {}
        for seg in self.writer.completed(wait=force):
            if self.disk:
                batch, sources = self.store.read(seg, verify=False)
                self.online.add_segment(seg.index, batch, sources)
            durable.update(seg.seqs)
        return durable

    def flush(self) -> dict[str, list]:
        """Write everything received so far and wait for it (before a checkpoint or at shutdown)."""
        return self.poll(force=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    # --- sampling -------------------------------------------------------------------------------
    def can_sample(self) -> bool:
        """Whether online data is there to sample (with storage=disk, only what has reached the disk)."""
        return self.online.size > 0

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator,
        gamma: float,
        n_step: int = 1,
        chunk: int = 1,
        extras: tuple[str, ...] = (),
        where: str | None = None,
        settled: bool = False,
    ) -> dict:
        """`online_fraction` of the batch from online data, the rest from demos and interventions pooled
        (by their sizes); all online when there is no prior data yet. `where`: see `ReplayBuffer.sample_rows`;
        `settled`: see `ReplayBuffer.pending`."""
        interventions = self.online.interventions  # kept on every write: no scan of the ring per batch
        n_int_rows = len(interventions) if self.cfg.interventions_in_prior else 0
        n_demo_rows = self.demos.size if self.demos else 0
        n_prior = int(round(batch_size * (1.0 - self.cfg.online_fraction))) if n_demo_rows + n_int_rows else 0
        n_int = int(rng.binomial(n_prior, n_int_rows / (n_demo_rows + n_int_rows))) if n_prior else 0
        self.last_prior_rows = n_prior
        rejected = self.rejected_takeovers
        parts = [
            self.online.sample(
                batch_size - n_prior, rng, gamma, n_step, chunk, extras, where=where, rejected=rejected, settled=settled
            )
        ]
        if n_int:
            parts.append(
                self.online.sample(
                    n_int,
                    rng,
                    gamma,
                    n_step,
                    chunk,
                    extras,
                    among=interventions,
                    where=where,
                    rejected=rejected,
                    settled=settled,
                )
            )
        if n_prior - n_int:
            parts.append(
                self.demos.sample(n_prior - n_int, rng, gamma, n_step, chunk, extras, where=where, settled=settled)
            )
        return concat_batches(parts)

    # --- checkpoints ----------------------------------------------------------------------------
    def state(self) -> dict:
        """What a checkpoint records about the replay (call `flush` first)."""
        if self.store is None:
            return {"persisted": False, "records": int(self.online.writes)}
        return {
            "persisted": True,
            "manifest": str(self.store.manifest),
            "segments": len(self.store.segments),
            "records": self.store.num_records,
        }

    def restore(self, state: dict | None) -> tuple[list[tuple[str, dict]], dict[str, list]]:
        """Re-add the stored online records in their arrival order. Returns the records past the
        checkpoint's segment count (data that arrived after it, before a kill) as (actor, batch) runs,
        and {actor: [session, seq]} of the newest stored message per actor."""
        if self.store is None:
            return [], {}
        upto = 0 if state is None else state.get("segments", 0)  # no checkpoint: every stored record is new to it
        if state is not None and state.get("persisted") and upto > len(self.store.segments):
            log.error(
                "the checkpoint goes with %d segments of %s but only %d are there: resuming with what exists",
                upto,
                self.store.root,
                len(self.store.segments),
            )
        later, seqs = [], {}
        position = {s.name: i for i, s in enumerate(self.store.segments)}
        for seg, batch, sources in self.store.iter_segments(verify=self.cfg.verify_on_load, mmap=True):
            if self.disk:
                self.online.add_segment(seg.index, batch, sources)
            else:
                self.online.add({k: np.asarray(v) for k, v in batch.items()}, sources)
            self._count_online(batch)
            seqs.update(seg.seqs)
            self._note_sessions(seg.messages)
            if position[seg.name] >= upto:
                later += _runs(batch, sources)
        for problem in self.store.problems:
            log.error("replay: %s", problem)
        return later, seqs

    def _note_sessions(self, messages: list[list]) -> None:
        """Keep, per actor, its newest stored session and the hash of that session's token."""
        for actor, session, _seq, token in messages:
            self.sessions[actor] = {"session": session, "token_hash": token}


def _runs(batch: dict, sources: np.ndarray) -> list[tuple[str, dict]]:
    """Split records into consecutive runs of one source each."""
    cuts = np.flatnonzero(sources[1:] != sources[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(sources)]
    return [
        (str(sources[a]), {k: np.asarray(v[a:b]) for k, v in batch.items()})
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        if b > a
    ]
