"""The actor process: runs the env at its control rate with the latest policy and streams step records.

It never blocks its control loop on the network: sends are non-blocking (a bounded outbox holds what
the socket cannot take yet) and new weights are applied between steps.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from robo_rl.config import config_hash, make_env, make_policy
from robo_rl.policy_io import policy_action
from robo_rl.schema import EpisodeRecorder, fields_for_env, stack_records
from robo_rl.shutdown import ignore_further_interrupts
from robo_rl.transport.codec import arrays_to_state_dict
from robo_rl.transport.link import ActorLink

log = logging.getLogger(__name__)


class Actor:
    def __init__(self, cfg: DictConfig, progress: bool = True) -> None:
        torch.set_num_threads(cfg.torch_threads)
        self.cfg = cfg
        self.progress = progress
        self.env = make_env(cfg)
        self.policy = make_policy(cfg, self.env).eval()
        self.fields = fields_for_env(self.env)
        self.policy_version = -1  # -1: still the untrained initial policy
        self.allowed_steps = float("inf") if not cfg.actor.throttle_to_learner else 0
        self.learner_received = self.received_from_me = 0
        self.stop_reason: str | None = None
        self.sent_steps = 0
        t = cfg.transport
        self.link = ActorLink(t.host, t.data_port, t.weights_port, t.ctrl_port, cfg.actor.id)

    def handle(self, messages: list) -> None:
        for kind, meta, arrays in messages:
            if kind == "weights" and meta["version"] > self.policy_version:
                self.policy.load_state_dict(arrays_to_state_dict(arrays))
                self.policy_version = int(meta["version"])
            elif kind == "status":
                self.allowed_steps = meta["allowed_env_steps"] if self.cfg.actor.throttle_to_learner else float("inf")
                self.learner_received = meta["env_steps"]
                self.received_from_me = meta["received"].get(self.cfg.actor.id, 0)
            elif kind == "stop":
                self.stop_reason = meta.get("reason", "stopped by the learner")

    def _throttled(self) -> bool:
        # steps still in flight count against the learner's budget as if already received
        in_flight = max(0, self.sent_steps - self.received_from_me)
        return self.learner_received + in_flight >= self.allowed_steps

    def run(self) -> str:
        cfg = self.cfg
        self.handle(self.link.hello(config_hash(cfg), cfg.actor.hello_timeout_s))
        rng = np.random.default_rng(cfg.seed + 7919)
        session = int(time.time()) % 100000  # keeps episode ids unique across actor restarts
        recorder = EpisodeRecorder(self.env.action_space.shape[0])
        episode = 0
        obs, _ = self.env.reset(seed=cfg.seed)
        pending = [recorder.reset(obs, session * 1_000_000 + episode, self.policy_version, time.time())]
        period = 1.0 / self.env.control_hz
        last_beat = next_tick = time.monotonic()
        bar = tqdm(desc=f"{cfg.actor.id} env steps", unit="step", disable=not self.progress)
        try:
            while self.stop_reason is None:
                self.handle(self.link.poll())
                if self._throttled():
                    self.handle(self.link.poll(timeout_ms=20))
                else:
                    if self.sent_steps < cfg.train.random_steps:
                        action = rng.uniform(-1, 1, self.env.action_space.shape).astype(np.float32)
                    else:
                        action = policy_action(self.policy, obs, deterministic=False)
                    obs, reward, terminated, truncated, info = self.env.step(action)
                    pending.append(recorder.record_step(obs, reward, terminated, truncated, info,
                                                        self.policy_version, time.time()))  # fmt: skip
                    self.sent_steps += 1
                    bar.update(1)
                    if terminated or truncated:
                        episode += 1
                        self._send(pending)
                        obs, _ = self.env.reset()
                        pending = [recorder.reset(obs, session * 1_000_000 + episode, self.policy_version, time.time())]
                    elif len(pending) >= cfg.actor.steps_per_message:
                        self._send(pending)
                        pending = []
                    if cfg.actor.realtime:
                        next_tick += period
                        time.sleep(max(0.0, next_tick - time.monotonic()))
                now = time.monotonic()
                if now - last_beat > cfg.actor.heartbeat_every_s:
                    self.link.heartbeat()
                    last_beat = now
        except KeyboardInterrupt:
            self.stop_reason = "interrupted (Ctrl-C)"
        finally:
            ignore_further_interrupts()
            if pending:
                self._send(pending)
            bar.close()
            self.link.close()
            self.env.close()
        return self.stop_reason

    def _send(self, records: list[dict]) -> None:
        self.link.send_steps({"policy_version": self.policy_version}, stack_records(records, self.fields))
