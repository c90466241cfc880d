"""The learner process: receives step records, keeps the replay, runs SAC at an enforced UTD,
publishes the policy, writes metrics and checkpoints."""

from __future__ import annotations

import collections
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from robo_rl.algos.sac import SAC, SACConfig
from robo_rl.config import config_hash, make_env, make_policy
from robo_rl.demos import load_or_make_demos
from robo_rl.policy_io import batch_to_torch
from robo_rl.replay import ReplayBuffer, concat_batches
from robo_rl.runs import MetricsWriter, load_checkpoint, save_checkpoint
from robo_rl.schema import fields_for_env
from robo_rl.shutdown import ignore_further_interrupts
from robo_rl.transport.codec import state_dict_to_arrays
from robo_rl.transport.link import LearnerLink
from robo_rl.transport.security import LEARNER_KEY, curve_keys

log = logging.getLogger(__name__)


def sac_config(algo: DictConfig) -> SACConfig:
    keys = SACConfig.__dataclass_fields__
    return SACConfig(**{k: (tuple(v) if k == "critic_hidden" else v) for k, v in algo.items() if k in keys})


class Learner:
    def __init__(self, cfg: DictConfig, run_dir: Path, progress: bool = True) -> None:
        torch.set_num_threads(cfg.torch_threads)
        torch.manual_seed(cfg.seed)
        self.cfg, self.run_dir, self.progress = cfg, Path(run_dir), progress
        env = make_env(cfg)
        self.fields = fields_for_env(env)
        self.policy = make_policy(cfg, env)
        self.sac = SAC(self.policy, env.observation_space, sac_config(cfg.algo))
        env.close()
        self.rng = np.random.default_rng(cfg.seed)
        self.online = ReplayBuffer(cfg.train.replay_capacity, self.fields)
        demos, _, _ = load_or_make_demos(cfg, progress=False)
        self.demos = ReplayBuffer(len(demos["step"]), self.fields)
        self.demos.add(demos, source="demos")
        self.env_steps = self.updates = self.episodes = self.version = 0
        self.recent = collections.deque(maxlen=20)  # success of the last training episodes
        self._returns: dict[tuple, float] = {}
        if cfg.resume:
            self._restore(load_checkpoint(cfg.resume))
        # the UTD budget counts from here: a resumed learner with an empty replay refills `learning_starts` first
        self.steps_base, self.updates_base = (self.env_steps, self.updates) if len(self.online) == 0 else (0, 0)
        t = cfg.transport
        self.link = LearnerLink(t.host, t.data_port, t.weights_port, t.ctrl_port, config_hash(cfg),
                                actor_timeout_s=t.actor_timeout_s, curve=curve_keys(cfg, LEARNER_KEY),
                                shared_memory_weights=t.shared_memory_weights)  # fmt: skip
        self.metrics = MetricsWriter(self.run_dir / "metrics.jsonl")
        (self.run_dir / "learner.pid").write_text(str(os.getpid()))  # tells `train` the sockets are bound

    # --- data ---------------------------------------------------------------------------------
    def ingest(self, actor: str, arrays: dict) -> None:
        try:
            self.online.add(arrays, source=actor)
        except ValueError as e:
            self.link.reject(f"invalid step batch: {e}", actor)
            return
        live = arrays["step"] > 0
        self.env_steps += int(live.sum())
        for i in np.flatnonzero(live):
            key = (actor, int(arrays["episode_id"][i]))
            self._returns[key] = self._returns.get(key, 0.0) + float(arrays["reward"][i])
            if arrays["terminated"][i] or arrays["truncated"][i]:
                self.episodes += 1
                success = bool(arrays["success"][i])
                self.recent.append(success)
                self.metrics.write({"kind": "episode", "env_steps": self.env_steps, "episode": self.episodes,
                                    "actor": actor, "success": success, "return": self._returns.pop(key),
                                    "length": int(arrays["step"][i])})  # fmt: skip

    def sample(self) -> dict:
        cfg = self.cfg.algo
        n_demo = int(round(cfg.batch_size * cfg.demo_fraction))
        parts = [self.online.sample(cfg.batch_size - n_demo, self.rng, cfg.gamma)]
        if n_demo:
            parts.append(self.demos.sample(n_demo, self.rng, cfg.gamma))
        return batch_to_torch(concat_batches(parts))

    # --- the loop -----------------------------------------------------------------------------
    @property
    def learning_steps(self) -> int:
        """Online env steps received past `learning_starts` (counted from the base of this process)."""
        return self.env_steps - self.steps_base - self.cfg.train.learning_starts

    @property
    def update_budget(self) -> float:
        """Critic updates owed for the data received: UTD × online steps past `learning_starts`."""
        return self.updates_base + self.cfg.train.utd * self.learning_steps

    def run(self) -> str:
        cfg, train = self.cfg, self.cfg.train
        self.publish_weights()
        bar = tqdm(total=train.total_env_steps, initial=self.env_steps, desc="learner env steps", unit="step",
                   disable=not self.progress)  # fmt: skip
        last_log = last_status = time.monotonic()
        last_updates, next_ckpt = self.updates, self.env_steps + train.checkpoint_every_env_steps
        reason, m = "done", {}
        try:
            while self.env_steps < train.total_env_steps:
                can_update = self.updates < self.update_budget
                before = self.env_steps
                for actor, arrays in self.link.poll(timeout_ms=0 if can_update else 20):
                    self.ingest(actor, arrays)
                bar.update(self.env_steps - before)
                if can_update:
                    m = self.sac.update([self.sample() for _ in range(cfg.algo.critic_updates_per_actor)])
                    self.updates += cfg.algo.critic_updates_per_actor
                    if self.updates % train.weights_every_updates < cfg.algo.critic_updates_per_actor:
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
                if self.env_steps >= next_ckpt:
                    self.checkpoint()
                    next_ckpt += train.checkpoint_every_env_steps
        except KeyboardInterrupt:
            reason = "interrupted (Ctrl-C)"
        finally:
            ignore_further_interrupts()
            bar.close()
            path = self.checkpoint()
            self.link.stop_actors(reason)
            time.sleep(0.2)  # let the stop message leave before the sockets close
            self.link.close()
            self.metrics.write({"kind": "end", "reason": reason, "checkpoint": str(path), "env_steps": self.env_steps})
            self.metrics.close()
        return reason

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.recent)) if self.recent else 0.0

    def publish_weights(self) -> None:
        self.version += 1
        self.link.publish_weights(self.version, state_dict_to_arrays(self.policy.state_dict()))

    def publish_status(self) -> None:
        train = self.cfg.train
        allowed = (self.steps_base + train.learning_starts + (self.updates - self.updates_base) / train.utd
                   + self.cfg.actor.max_lead_steps)  # fmt: skip
        self.link.publish_status({"env_steps": self.env_steps, "updates": self.updates,
                                  "allowed_env_steps": allowed})  # fmt: skip

    def log_progress(self, updates_per_s: float, update_metrics: dict) -> None:
        realised_utd = (self.updates - self.updates_base) / max(1, self.learning_steps)
        self.metrics.write({
            "kind": "learner", "env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes,
            "success_rate": self.success_rate, "updates_per_s": updates_per_s, "realised_utd": realised_utd,
            "policy_version": self.version, "bad_messages": dict(self.link.bad_messages),
            "duplicates": self.link.duplicates, "actors_alive": len(self.link.alive_actors),
            "actor_stats": {a: info["stats"] for a, info in self.link.actors.items()}, **update_metrics,
        })  # fmt: skip

    # --- checkpoints --------------------------------------------------------------------------
    def checkpoint(self) -> Path:
        return save_checkpoint(self.run_dir, self.env_steps, {
            "algo": self.sac.state_dict(),
            "counters": {"env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes,
                         "version": self.version},
            "rng": {"torch": torch.get_rng_state(), "numpy": self.rng.bit_generator.state},
            "config_hash": config_hash(self.cfg),
        })  # fmt: skip

    def _restore(self, payload: dict) -> None:
        self.sac.load_state_dict(payload["algo"])
        c = payload["counters"]
        self.env_steps, self.updates, self.episodes, self.version = (
            c["env_steps"], c["updates"], c["episodes"], c["version"])  # fmt: skip
        torch.set_rng_state(payload["rng"]["torch"])
        self.rng.bit_generator.state = payload["rng"]["numpy"]
        log.info("resumed from %s at %d env steps", payload["path"], self.env_steps)
