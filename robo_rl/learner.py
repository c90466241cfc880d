"""The learner process: receives step records, keeps the replay, runs the configured algorithm (see
`robo_rl/algos/base.py`; it knows no algorithm by name) on the schedule its batch spec asks for (an enforced UTD, or
rollout-then-update: `robo_rl/schedule.py`), publishes the acting policy's trainable weights, writes metrics and
checkpoints."""

from __future__ import annotations

import collections
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from robo_rl.algos.base import resolve_device
from robo_rl.algos.guards import TrainingGuards
from robo_rl.config import ConfigError, config_hash, make_algorithm, make_policy
from robo_rl.data.demos import load_or_make_demos
from robo_rl.data.learner_replay import LearnerReplay
from robo_rl.data.schema import EXTRA, fields_for_env
from robo_rl.data.tasks import with_row_instructions
from robo_rl.envs.spec import EnvSpec, learner_spec, spec_check
from robo_rl.loggers import metrics_writer
from robo_rl.policy_io import batch_to_torch
from robo_rl.rewards.relabel import make_relabeller, relabel_prior, rlif_rejects, uses_learned_reward
from robo_rl.runs import CheckpointError, load_resume_checkpoint, remove_unfinished_checkpoints, save_checkpoint
from robo_rl.schedule import make_schedule
from robo_rl.shutdown import ignore_further_interrupts
from robo_rl.transport.codec import state_dict_to_arrays
from robo_rl.transport.link import LearnerLink
from robo_rl.transport.security import LEARNER_KEY, curve_keys

log = logging.getLogger(__name__)


class Learner:
    def __init__(self, cfg: DictConfig, run_dir: Path, progress: bool = True) -> None:
        torch.set_num_threads(cfg.torch_threads)
        torch.manual_seed(cfg.seed)
        self.cfg, self.run_dir, self.progress = cfg, Path(run_dir), progress
        self.device = resolve_device(cfg.device)
        t = cfg.transport
        self.link = LearnerLink(
            t.host,
            t.data_port,
            t.weights_port,
            t.ctrl_port,
            config_hash(cfg),
            actor_timeout_s=t.actor_timeout_s,
            max_message_mb=t.max_message_mb,
            max_held_mb=t.max_held_mb,
            receive_queue_messages=t.receive_queue_messages,
            curve=curve_keys(cfg, LEARNER_KEY),
            shared_memory_weights=t.shared_memory_weights,
        )
        self.link.auto_ack = not cfg.replay.persist  # with a persisted replay, ack only what is on disk
        self._early: list = []  # data that came while the learner waited for an actor's env spec
        self.link.spec_check = _readable_spec  # until the spaces are known, a hello's spec must at least be one
        try:  # the task's spaces, never by opening the env (on a robot that would open the hardware)
            spec = learner_spec(
                cfg,
                self.run_dir,
                cfg.actor.learner_wait_s,  # a resume reads its run folder's
                from_actor=None if cfg.resume else self._actor_spec,
            )  # (hellos wait for `expect`)
        except (FileNotFoundError, ValueError) as e:
            self.link.close()
            raise ConfigError(str(e)) from None
        except BaseException:
            self.link.close()
            raise
        self.link.spec_check = spec_check(spec)  # an actor with another env is refused at its hello, by name
        try:
            self._build(cfg, spec)
        except BaseException:
            self.link.close()
            raise

    def _build(self, cfg: DictConfig, spec) -> None:
        self.policy = make_policy(cfg, spec).to(self.device)
        self.relabel = make_relabeller(cfg)  # a learned reward scored here (reward.where=learner), or None
        added = {f"{EXTRA}{k}": v for k, v in (self.relabel.extras if self.relabel else {}).items()}
        self.fields = {**fields_for_env(spec, self.policy), **added}
        self.algo = make_algorithm(cfg, self.policy, spec)
        self.rng = np.random.default_rng(cfg.seed)
        self.metrics = metrics_writer(cfg, self.run_dir)  # metrics.jsonl, plus TensorBoard or W&B if chosen
        demos, _, _ = load_or_make_demos(cfg, progress=False)
        if demos is not None:
            demos = self.algo.relabel_prior(with_row_instructions(demos))  # a base recomputed reads each's
            if uses_learned_reward(cfg):  # one reward in every batch: the demos' under the run's reward model too
                demos = relabel_prior(cfg, demos)
        steps, rejects = cfg.train.total_env_steps, rlif_rejects(cfg)  # RLIF: a takeover sampled as what it rejected
        self.replay = LearnerReplay(cfg.replay, self.fields, self.run_dir, demos, steps, rejects)
        self.guards = TrainingGuards.for_learner(cfg, self.algo, self.metrics, demos)  # flags runs measuring nothing
        self.schedule = make_schedule(self.algo.batch_spec, cfg, self.replay, self.rng, self.policy)
        print(self.replay.usage(), flush=True)
        self.env_steps = self.updates = self.episodes = self.version = 0
        self.recent = collections.deque(maxlen=20)  # success of the last training episodes
        self._returns: dict[tuple, float] = {}
        self._human: dict[tuple, int] = {}  # intervention steps of each running episode
        self._learned: dict[tuple, dict] = {}  # with a learned reward: each running episode's env return, best p
        self._published: dict[int, float] = {}  # policy version → when it was published (monotonic)
        self._stale_versions: list[int] = []  # per env step received since the last log line
        self.health: dict = {}  # updates/s, realised UTD, staleness, buffer sizes: sent to actors (and the GUI)
        self._stale_seconds: list[float] = []
        stored_seqs: dict[str, list] = {}
        if cfg.resume:
            stored_seqs = self._resume(cfg.resume)
        # the UTD budget counts from here: a resumed learner with an empty replay refills `learning_starts` first
        self.steps_base, self.updates_base = (self.env_steps, self.updates) if not self.replay.online.size else (0, 0)
        for actor, (session, seq) in stored_seqs.items():
            known = self.replay.sessions.get(actor, {})
            same = known.get("session") == session
            self.link.expect(actor, session, seq, known.get("token_hash") if same else None)
        for message in self._early:
            self.ingest(*message)
        self._early = []
        (self.run_dir / "learner.pid").write_text(str(os.getpid()))  # tells `train` the sockets are bound

    def _actor_spec(self) -> str | None:
        """While waiting for the spec: serve the link (hellos are welcomed, data is kept for later)."""
        self._early.extend(self.link.poll(timeout_ms=200))
        return self.link.first_spec

    # --- data ---------------------------------------------------------------------------------
    def ingest(
        self, actor: str, arrays: dict, session=None, seq: int | None = None, token_hash: str | None = None
    ) -> None:
        """Store one received message and count its steps; a batch that cannot be stored is dropped, counted,
        logged and reported to its actor, and the learner serves on."""
        try:
            if self.relabel is not None:
                arrays = self.relabel(actor, arrays)
            self.replay.add(actor, arrays, session, seq, token_hash)
            self.schedule.add(actor, arrays)
        except Exception as e:  # not a shape or value problem: a bug, worth its traceback (the link thins the log)
            self.link.reject(f"invalid step batch: {e}", actor, exc_info=None if isinstance(e, ValueError) else e)
            if seq is not None:
                self.link.report_rejected(actor, seq, f"invalid step batch: {e}")
            return
        self._count(actor, arrays)

    def _count(self, actor: str, arrays: dict, log_episodes: bool = True) -> None:
        live = arrays["step"] > 0
        self.env_steps += int(live.sum())
        self.guards.rewards(arrays["reward"][live])
        if log_episodes:
            self._note_staleness(arrays["policy_version"][live])
        for i in np.flatnonzero(live):
            key = (actor, int(arrays["episode_id"][i]))
            self._returns[key] = self._returns.get(key, 0.0) + float(arrays["reward"][i])
            self._human[key] = self._human.get(key, 0) + int(arrays["intervention"][i])
            if "extra/reward_env" in arrays:  # a learned reward: the env's own return and the model's best guess
                sums = self._learned.setdefault(key, {"return_env": 0.0, "success_prob_max": -1.0})
                sums["return_env"] += float(arrays["extra/reward_env"][i])
                sums["success_prob_max"] = max(sums["success_prob_max"], float(arrays["extra/success_prob"][i]))
            if arrays["terminated"][i] or arrays["truncated"][i]:
                self.episodes += 1
                success = bool(arrays["success"][i])
                self.recent.append(success)
                self.guards.episode(success, self._learned.get(key))
                if log_episodes:
                    instruction = self.replay.tasks.name(int(arrays["task"][i]))
                    self.metrics.write(
                        {
                            "kind": "episode",
                            "env_steps": self.env_steps,
                            "episode": self.episodes,
                            "actor": actor,
                            "episode_id": key[1],
                            "success": success,
                            "return": self._returns.pop(key),
                            "length": int(arrays["step"][i]),
                            "intervention_steps": self._human.pop(key, 0),
                            **({"instruction": instruction} if instruction is not None else {}),  # a task's own
                            **self._learned.pop(key, {}),
                        }
                    )
                else:
                    for tally in (self._returns, self._human, self._learned):
                        tally.pop(key, None)

    def _note_staleness(self, versions: np.ndarray) -> None:
        """How far behind the current policy the weights that acted were: in versions, and in seconds
        since those weights were published (versions published before a restart have no time)."""
        if not len(versions):
            return
        now = time.monotonic()
        self._stale_versions.extend((self.version - versions).tolist())
        for v, n in zip(*np.unique(versions, return_counts=True), strict=True):
            if int(v) in self._published:
                self._stale_seconds.extend([now - self._published[int(v)]] * int(n))

    def acknowledge(self, durable: dict[str, list]) -> None:
        """Tell actors which of their messages are now on disk (they may forget them)."""
        for actor, (session, seq) in durable.items():
            info = self.link.actors.get(actor)
            if info is not None and info["session"] == session:
                self.link.ack(actor, seq)

    def update(self) -> dict:
        """One round of the algorithm's update on the batches its schedule gives (each counted as one update)."""
        # each batch drawn while the one before travels to the GPU
        batches = [batch_to_torch(batch, self.device) for batch in self.schedule.batches()]
        metrics = self.guards.update(self.algo.update(batches))  # with each guard's state
        self.updates += len(batches)
        self.schedule.report(metrics, self)
        return metrics

    # --- the loop -----------------------------------------------------------------------------
    @property
    def learning_steps(self) -> int:
        """Online env steps received past `learning_starts` (counted from the base of this process)."""
        return self.env_steps - self.steps_base - self.cfg.train.learning_starts

    def run(self) -> str:
        cfg, train = self.cfg, self.cfg.train
        self.publish_weights()
        bar = tqdm(
            total=train.total_env_steps,
            initial=self.env_steps,
            desc="learner env steps",
            unit="step",
            disable=not self.progress,
        )
        last_log = last_status = time.monotonic()
        last_updates, next_ckpt = self.updates, self.env_steps + train.checkpoint_every_env_steps
        ckpt_time, ckpt_steps = time.monotonic(), self.env_steps  # the last checkpoint's: a timed one needs new data
        reason, m, crash = "done", {}, None
        try:
            while self.env_steps < train.total_env_steps:
                can_update = self.schedule.due(self)
                before = self.env_steps
                for actor, arrays, session, seq, token_hash in self.link.poll(timeout_ms=0 if can_update else 20):
                    self.ingest(actor, arrays, session, seq, token_hash)
                self.acknowledge(self.replay.poll())
                bar.update(self.env_steps - before)
                if can_update:
                    m = self.update()
                    if self.schedule.publish_due(self):
                        self.publish_weights()
                now = time.monotonic()
                if now - last_status > 0.02:
                    self.publish_status()
                    last_status = now
                if now - last_log > cfg.logger.log_every_s:
                    ups = (self.updates - last_updates) / (now - last_log)
                    self.log_progress(ups, m)
                    bar.set_postfix(episodes=self.episodes, success=f"{self.success_rate:.2f}", upd_s=f"{ups:.0f}")
                    last_log, last_updates = now, self.updates
                timed = now - ckpt_time >= train.checkpoint_every_s and self.env_steps > ckpt_steps
                if self.env_steps >= next_ckpt or timed:  # by env steps or by time, whichever comes first
                    self.checkpoint()
                    if self.env_steps >= next_ckpt:  # a timed checkpoint leaves the env-step grid as it was
                        next_ckpt += train.checkpoint_every_env_steps
                    ckpt_time, ckpt_steps = time.monotonic(), self.env_steps
        except KeyboardInterrupt:
            reason = "interrupted (Ctrl-C)"
        except BaseException as e:  # recorded as a crash (not "done"), then raised: the process exits non-zero
            reason, crash = f"crashed: {type(e).__name__}: {e}", e
            log.exception("the learner crashed")
        finally:
            ignore_further_interrupts()
            bar.close()
            path = self._final_checkpoint()
            # only a finished run ends the actors; otherwise they hold, keeping their data, for a restarted learner
            self.link.stop_actors(reason, hold=reason != "done")
            time.sleep(0.2)  # let the stop message leave before the sockets close
            self.close()
            self.metrics.write(
                {
                    "kind": "end",
                    "reason": reason,
                    "crashed": crash is not None,
                    "checkpoint": str(path) if path else None,
                    "env_steps": self.env_steps,
                    "actor_stats": self.link.actor_stats(),
                }
            )
            self.metrics.close()
        if crash is not None:
            raise crash
        return reason

    def _final_checkpoint(self) -> Path | None:
        try:
            return self.checkpoint()
        except Exception:  # a crash in the replay or the disk may stop this too: the end record is still written
            log.exception("the final checkpoint failed; resume falls back to the one before")
            return None

    def close(self) -> None:
        self.replay.close()
        self.link.close()

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.recent)) if self.recent else 0.0

    def publish_weights(self) -> None:
        self.version += 1
        self.schedule.published(self.version)
        self.link.publish_weights(self.version, state_dict_to_arrays(self.algo.actor_weights()))
        self._published[self.version] = time.monotonic()
        self._published.pop(self.version - 10_000, None)

    def publish_status(self) -> None:
        allowed = self.schedule.allowed_env_steps(self)
        self.link.publish_status(
            {"env_steps": self.env_steps, "updates": self.updates, "allowed_env_steps": allowed, **self.health}
        )

    def log_progress(self, updates_per_s: float, update_metrics: dict) -> None:
        realised_utd = (self.updates - self.updates_base) / max(1, self.learning_steps)
        stale = {}
        if self._stale_versions:
            stale["staleness_versions_mean"] = float(np.mean(self._stale_versions))
            stale["staleness_versions_max"] = int(np.max(self._stale_versions))
        if self._stale_seconds:
            stale["staleness_s_mean"] = float(np.mean(self._stale_seconds))
            stale["staleness_s_max"] = float(np.max(self._stale_seconds))
        self._stale_versions, self._stale_seconds = [], []
        replay = self.replay
        self.health = {
            "updates_per_s": float(updates_per_s),
            "realised_utd": float(realised_utd),
            "staleness_versions": float(stale.get("staleness_versions_mean", 0.0)),
            "actors_alive": len(self.link.alive_actors),
            "buffer_online": int(replay.online.size),
            "buffer_prior": int(replay.demos.size if replay.demos is not None else 0),
            "buffer_interventions": _count_or_zero(replay.online.intervention_rows),
        }
        self.metrics.write(
            {
                "kind": "learner",
                "env_steps": self.env_steps,
                "updates": self.updates,
                "episodes": self.episodes,
                "success_rate": self.success_rate,
                "updates_per_s": updates_per_s,
                "realised_utd": realised_utd,
                "policy_version": self.version,
                "bad_messages": dict(self.link.bad_messages),
                "duplicates": self.link.duplicates,
                "internal_errors": self.link.internal_errors,
                "actors_alive": len(self.link.alive_actors),
                "actor_stats": self.link.actor_stats(),
                **stale,
                **update_metrics,
            }
        )

    # --- checkpoints --------------------------------------------------------------------------
    def checkpoint(self) -> Path:
        """Flush the replay to disk, then write a checkpoint that names the segments it goes with."""
        self.acknowledge(self.replay.flush())
        return save_checkpoint(
            self.run_dir,
            self.env_steps,
            {
                "algo": self.algo.state_dict(),
                "counters": {
                    "env_steps": self.env_steps,
                    "updates": self.updates,
                    "episodes": self.episodes,
                    "version": self.version,
                },
                "rng": {"torch": torch.get_rng_state(), "numpy": self.rng.bit_generator.state, **self._device_rng()},
                "replay": self.replay.state(),
                "recent": list(self.recent),
                "returns": [[a, e, r] for (a, e), r in self._returns.items()],
                "config_hash": config_hash(self.cfg),
            },
        )

    def _device_rng(self) -> dict:
        """The GPU's random generator (the policy's and critics' sampling on a GPU draw from it): exact resume."""
        return {"cuda": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {}

    def _resume(self, run: str) -> dict[str, list]:
        """Restore the latest checkpoint and the stored replay; data stored after the checkpoint (before a
        kill) is counted as received. Returns the newest stored message per actor."""
        remove_unfinished_checkpoints(run)  # a kill mid-write left them: never read, logged and deleted
        payload, skipped = load_resume_checkpoint(run)
        for problem in skipped:
            log.error("%s: skipped, resuming from the checkpoint before it", problem)
        if payload is None:
            if self.replay.store is None or not self.replay.store.segments:
                raise CheckpointError(f"nothing to resume in {run}: no checkpoint and no stored replay")
            log.warning("no checkpoint in %s (killed before the first one): fresh weights, the stored replay", run)
        else:
            self._restore(payload)
        at_checkpoint = self.env_steps
        later, seqs = self.replay.restore(payload.get("replay") if payload else None)
        for actor, arrays in later:
            self._count(actor, arrays, log_episodes=False)  # logged before the kill
        log.info(
            "resumed at %d env steps: %d from the checkpoint + %d stored after it; the replay holds %d records "
            "(each episode's first record is its reset observation, not an env step)",
            self.env_steps,
            at_checkpoint,
            self.env_steps - at_checkpoint,
            self.replay.online.writes,
        )
        return seqs

    def _restore(self, payload: dict) -> None:
        self.algo.load_state_dict(payload["algo"])
        c = payload["counters"]
        counters = ("env_steps", "updates", "episodes", "version")
        self.env_steps, self.updates, self.episodes, self.version = (c[name] for name in counters)
        torch.set_rng_state(payload["rng"]["torch"])
        if self.device.type == "cuda" and "cuda" in payload["rng"]:  # the GPU's generator too (a GPU run resumed there)
            torch.cuda.set_rng_state(payload["rng"]["cuda"], self.device)
        self.rng.bit_generator.state = payload["rng"]["numpy"]
        self.recent.extend(payload.get("recent", []))
        self._returns = {(a, int(e)): float(r) for a, e, r in payload.get("returns", [])}
        log.info("resumed from %s at %d env steps", payload["path"], self.env_steps)


def _readable_spec(text: str) -> str | None:
    """Why an env spec from a hello cannot be the run's (the actor is refused, the learner waits on), or None."""
    try:
        EnvSpec.from_json(json.loads(text), "the env spec in the hello")
    except ValueError as e:  # json's decode error is one too
        return str(e)
    return None


def _count_or_zero(rows) -> int:
    """How many rows `rows()` gives, 0 where this buffer cannot say (a health figure, never a reason to stop)."""
    try:
        return int(len(rows()))
    except (KeyError, AttributeError, ValueError):
        return 0
