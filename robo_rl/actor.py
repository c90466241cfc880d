"""The actor process: runs the env at its control rate with the latest policy and streams step records.

It never blocks its control loop on the network: sends are non-blocking (a bounded outbox holds what the socket
cannot take yet) and new weights are applied between steps.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import time

import numpy as np
import numpy.ma  # noqa: F401 - np.percentile imports it lazily: on the link thread, under the GIL, it stalled a tick
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from policies.acting import NoAction, acting_policy
from robo_rl.algos.base import load_trainable_state
from robo_rl.config import ConfigError, config_hash, make_policy
from robo_rl.configs.run import learner_timeout_s
from robo_rl.data.schema import ENDED_BY_CODES, EpisodeRecorder, extras_of, fields_for_env, stack_records
from robo_rl.data.tasks import TaskTable, pack_instructions
from robo_rl.envs.actor_task import ActorTaskError, check_actor_task, env_tasks, reset_options
from robo_rl.envs.base import SafetyStop
from robo_rl.envs.groups import GroupedResets
from robo_rl.envs.resets import ResetWrapper
from robo_rl.envs.spec import spec_of, write_spec
from robo_rl.envs.wrappers import find_safety, find_wrapper, make_actor_env
from robo_rl.loop_timing import LoopClock
from robo_rl.policy_io import stack_obs
from robo_rl.seeding import ENV_SEED_STRIDE
from robo_rl.shutdown import ignore_further_interrupts
from robo_rl.teleop.intervention import InterventionWrapper
from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import arrays_to_state_dict
from robo_rl.transport.security import curve_keys
from robo_rl.transport.threaded import REALTIME_POLL_MS, SIM_POLL_MS, ActorTransport

log = logging.getLogger(__name__)
NO_ACTION_STOP = 3  # steps in a row without an action from the policy (a policy server late) before the actor stops


def _reward_wrapper_class():
    from robo_rl.rewards.wrapper import RewardWrapper

    return RewardWrapper


class Actor:
    def __init__(self, cfg: DictConfig, progress: bool = True) -> None:
        torch.set_num_threads(cfg.torch_threads)
        self.cfg = cfg
        # the control loop's settings as plain values: a DictConfig lookup costs tens of µs and the loop (a throttled
        # one hundreds of times a second) read several each pass, a tenth of the actor's CPU in a sim run
        a = cfg.actor
        self._weights_each_step = a.apply_weights == "step"
        self._throttle = bool(a.throttle_to_learner)
        self._learner_wait_s, self._drain_s = float(a.learner_wait_s), float(a.drain_s)
        self._random_steps = int(cfg.train.random_steps)
        self._steps_per_message = int(a.steps_per_message)
        self._realtime = bool(a.realtime)
        self.progress = progress
        self.env = make_actor_env(cfg)  # the task's env inside `actor.wrappers` (the human's arbitration, ...)
        try:  # actor.task: one of the env's tasks, every episode (None: the env draws one per episode)
            check_actor_task(a.task, env_tasks(self.env))
        except ActorTaskError:
            self.env.close()
            raise
        self._reset_options = reset_options(a.task)
        self.gui = None
        if cfg.gui.enabled:  # the page can always take over: a web device joins the human's devices
            from robo_rl.gui.bridge import attach_web_device

            self.env, web = attach_web_device(self.env)
        self.human: InterventionWrapper | None = find_wrapper(self.env, InterventionWrapper)
        self.reward = find_wrapper(self.env, _reward_wrapper_class()) if cfg.reward else None
        self.safety = find_safety(self.env)  # a robot's safety layer (hardware/safety.py), found by what it does
        run_dir = cfg.run_dir or cfg.resume
        if run_dir:  # the learner reads the spaces from here; an env that differs from the run's is refused
            try:
                write_spec(spec_of(self.env), run_dir)
            except ValueError as e:
                self.env.close()
                raise ConfigError(str(e)) from None
            except OSError as e:  # the hello tells the learner the spec too
                log.warning("could not write the env spec into %s: %s", run_dir, e)
            if self.reward is not None:  # `robo-rl reward retrain <run>`'s new model versions, swapped in between steps
                self.reward.watch_run(run_dir)
        self.policy = make_policy(cfg, self.env).eval()  # what new weights replace
        self.acting = acting_policy(self.policy)  # the same policy, as the loop calls it (policies/acting.py)
        try:  # actor.chunking: a chunked policy's next chunk computed off the loop (policies/chunking.py)
            self.acting.use_chunking(a.chunking, a.inference_delay_steps, 1.0 / self.env.control_hz)
        except ValueError as e:
            self.env.close()
            raise ConfigError(str(e)) from None
        self.envs = [self.env]  # `actor.num_envs` copies of the task's env, stepped together (sim only)
        num_envs = cfg.actor.num_envs
        if num_envs != 1:
            problem = self._why_not_several_envs(num_envs)
            if problem:
                self.env.close()
                raise ConfigError(f"actor.num_envs={num_envs}: {problem}")
            self.envs += [make_actor_env(cfg) for _ in range(num_envs - 1)]
        self.slots = list(range(num_envs))  # row i of a policy call is env i's
        self.grouped = [g for g in (find_wrapper(e, GroupedResets) for e in self.envs) if g is not None]
        self.resets = [r for r in (find_wrapper(e, ResetWrapper) for e in self.envs) if r is not None]  # reset_mode
        self.fields = fields_for_env(self.env, self.acting)
        self.tasks = TaskTable()  # this actor's instructions; each message carries those its records use
        self.policy_version = -1  # -1: still the untrained initial policy
        self.policy_since = time.monotonic()  # when this version arrived
        self.stop_reason: str | None = None
        self.sent_steps = 0
        self.sent_records = 0  # records handed to the transport: a long run's loss check counts them
        t = cfg.transport
        link = ActorLink(
            t.host,
            t.data_port,
            t.weights_port,
            t.ctrl_port,
            cfg.actor.id,
            curve=curve_keys(cfg, cfg.actor.id),
            shared_memory_weights=t.shared_memory_weights,
            learner_timeout_s=learner_timeout_s(cfg),
        )
        link.env_spec = json.dumps(spec_of(self.env).to_json())  # the learner reads the task's spaces from here
        self.transport = ActorTransport(
            link,
            self._load_weights,
            copy.deepcopy(self.policy),
            heartbeat_every_s=cfg.actor.heartbeat_every_s,
            extra_stats=self.loop_stats,
            poll_ms=REALTIME_POLL_MS if self._realtime else SIM_POLL_MS,
        )
        # the control periods (for their jitter; a reset's time is none), where each went, the policy calls' times
        self.clock = LoopClock(self.env.control_hz)
        self._waiting_since: float | None = None
        self.refused_steps = 0  # the policy gave no finite action: the episode ended there (ended_by=safety)
        self._no_action_in_a_row = 0  # steps with no action from the policy (a policy server late), in a row
        self._warned_slow = False
        if cfg.gui.enabled:
            from robo_rl.gui.actor_view import ActorView

            self.gui = ActorView(self, web)
        self._obs = None
        if self.safety is not None and self.gui is not None:  # the page keeps showing the cameras while it waits
            self.safety.on_wait.append(lambda: self.gui.tick(self._obs))

    def _why_not_several_envs(self, num_envs: int) -> str | None:
        """Why this actor cannot step `num_envs` envs at once (None: it can). Several envs are for simulation: one
        policy call acts for all of them (batched), their episodes run independently."""
        cfg = self.cfg
        if num_envs < 1:
            return "must be at least 1"
        if self.env.unwrapped.drives_robot:
            return "a robot is one env: run one actor per arm (several envs in one actor are for simulation)"
        if cfg.actor.realtime:
            return "actor.realtime=true holds one env's control rate: several envs in one actor are for simulation"
        if cfg.gui.enabled or self.human is not None or self.safety is not None:
            return "the GUI, a human's interventions and a safety layer act on one env: use one env per actor there"
        if cfg.actor.apply_weights != "step":
            return "the envs' episodes end apart: weights are applied between steps (actor.apply_weights=step)"
        if not self.acting.vector_slots:
            return (
                f"the policy ({type(self.policy).__name__}) keeps one episode's state (a chunk queue) and acts for "
                f"one env: run several actor processes instead (policies that act for several: sac, reinflow, "
                f"dppo)"
            )
        return None

    def loop_stats(self) -> dict:
        """Control-loop period and its jitter (|period − 1/control_hz|) over the recent steps, in ms, and the
        counts of the layers around the loop (safety, human, learned reward). Called on the transport thread: a
        copy that races the control loop skips the timing figures for this heartbeat, never the counts."""
        stats = {"policy_version": self.policy_version, "refused_steps": self.refused_steps}
        stats["sent_records"] = self.sent_records
        stats.update(self.clock.stats())
        stats.update(self.acting.chunk_stats())  # a chunked policy's inference, delay, waits and switches
        if self.reward is not None:  # a learned reward: fallback steps (a critic down or slow), scoring time
            try:
                stats.update(self.reward.stats())
            except RuntimeError:  # the worker appended a scoring time while we read them
                pass
        for resets in self.resets:  # counts summed over the envs; which waits for a person, and why
            for key, value in resets.stats().items():
                stats[key] = stats.get(key, 0) + value if isinstance(value, int) else value
        if self.safety is not None:
            stats.update({f"safety_{k}": v for k, v in self.safety.stats().items()})
        if self.human is not None:
            stats["paused"] = bool(self.human.paused)  # the terminal's bar says so (a paused run trains nothing)
            if self.human.paused:
                stats["paused_why"] = (self.human.pause_reason or "paused")[:200]
            try:
                stats.update({f"human_{k}": v for k, v in self.human.stats().items()})
            except RuntimeError:  # the control loop added a latency while we read them: the next heartbeat has it
                pass
        return stats

    @staticmethod
    def _load_weights(policy, arrays: dict) -> None:
        """On the transport thread, into the spare policy: the control loop then only swaps a reference."""
        load_trainable_state(policy, arrays_to_state_dict(arrays))  # frozen backbones are built here, never sent

    def _sync(self, episode_boundary: bool) -> None:
        """Between steps: take the newest policy (or only at episode ends, if so configured), see a stop."""
        t = self.transport
        if t.error is not None:
            raise t.error
        if episode_boundary or self._weights_each_step:
            newer = t.take_policy(self.policy)
            if newer is not None:
                self.policy_version, self.policy = newer
                self.acting = acting_policy(self.policy)
                self.policy_since = time.monotonic()
                for group in self.grouped:  # a group compares episodes of one policy: new weights start new groups
                    group.regroup()
        if t.stop_reason:
            self.stop_reason = t.stop_reason

    def _decide(self, obs: list[dict], rng: np.random.Generator) -> tuple[np.ndarray, dict]:
        """Every env's action for its observation (and the policy's extras, row i env i's), from one policy call,
        timed; FloatingPointError if the policy itself refuses."""
        start = time.perf_counter()
        actions, extras = self._choose(obs, rng)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        self.clock.decide_ms.append(elapsed_ms)
        if elapsed_ms > 1e3 / self.env.control_hz and len(self.clock.decide_ms) > 10 and not self._warned_slow:
            self._warned_slow = True  # once: the heartbeat stats carry the figures from then on
            log.warning(
                "policy inference took %.1f ms, longer than the %.1f ms control period (%s Hz): the robot "
                "waits on the policy",
                elapsed_ms,
                1e3 / self.env.control_hz,
                self.env.control_hz,
            )
        return actions, extras

    def _choose(self, obs: list[dict], rng: np.random.Generator) -> tuple[np.ndarray, dict]:
        batch = stack_obs(obs)
        if self.sent_steps < self._random_steps:
            explored = self.acting.explore_step(batch)
            if explored is None:  # no warm-up of its own: uniform random actions
                return rng.uniform(-1, 1, (len(obs), *self.env.action_space.shape)).astype(np.float32), {}
            actions, extras = explored
        else:
            actions, extras = self.acting.act_with_extras(batch, deterministic=False, slots=self.slots)
        return actions.numpy(), {k: v.numpy() for k, v in extras.items()}

    def _holding(self) -> bool:
        """While no learner is there (it stopped before the end of the run, or went silent), take no steps and
        keep every record for resend; give up after `actor.learner_wait_s`."""
        why = self.transport.waiting_for_learner
        now = time.monotonic()
        if why is None:
            if self._waiting_since is not None:
                log.info("learner back after %.0f s: acting again", now - self._waiting_since)
            self._waiting_since = None
            return False
        if self._waiting_since is None:
            self._waiting_since = now
            log.warning(
                "holding: %s; waiting up to %.0f s (actor.learner_wait_s) for a learner, data kept for resend",
                why,
                self._learner_wait_s,
            )
        elif now - self._waiting_since > self._learner_wait_s:
            self.stop_reason = f"no learner for {self._learner_wait_s:.0f} s ({why})"
        return True

    def _throttled(self, pending: list[list[dict]]) -> bool:
        """In sim, hold back while the learner's UTD budget is spent (steps in flight, and the steps still
        `pending` in the actor's hands, count as received; this holds across a learner restart, which starts its
        counts afresh)."""
        status = self.transport.status
        if not self._throttle:
            return False
        if not status:
            return True
        unsent = sum(len(records) - 1 for records in pending)  # each env's newest record waits for its decision
        return status["env_steps"] + self.transport.in_flight_steps + unsent >= status["allowed_env_steps"]

    def run(self) -> str:
        """Steps the env (or `actor.num_envs` simulated ones together: one batched policy call a tick) until
        stopped; each env's episode is recorded and sent on its own, episode ids unique across them, env i seeded
        `seed + i * ENV_SEED_STRIDE`."""
        cfg, envs = self.cfg, self.envs
        self.transport.start(config_hash(cfg), cfg.actor.hello_timeout_s)
        self._sync(episode_boundary=True)
        rng = np.random.default_rng(cfg.seed + 7919)
        session = int(time.time()) % 100000  # keeps episode ids unique across actor restarts
        episode_ids = itertools.count(session * 1_000_000)
        recorders = [EpisodeRecorder(self.env.action_space.shape[0], extras_of(self.fields), self.tasks) for _ in envs]
        obs = [
            env.reset(seed=cfg.seed + i * ENV_SEED_STRIDE, options=self._reset_options)[0] for i, env in enumerate(envs)
        ]
        pending = [
            [r.reset(o, next(episode_ids), self.policy_version, time.time())]
            for r, o in zip(recorders, obs, strict=True)
        ]
        episodes = 0  # ended, over all envs
        period = 1.0 / self.env.control_hz
        next_tick = time.monotonic()
        several = f" ({len(envs)} envs)" if len(envs) > 1 else ""
        bar = tqdm(desc=f"{cfg.actor.id} env steps{several}", unit="step", disable=not self.progress)
        try:
            while self.stop_reason is None:
                self._sync(episode_boundary=all(r.step == 0 for r in recorders))
                if self._holding():
                    time.sleep(0.05)
                    next_tick = time.monotonic()
                elif self.human is not None and self.human.paused:  # the robot holds still until unpaused
                    self.human.poll()
                    if self.human.estopped:
                        self.stop_reason = f"e-stop from {self.human.estopped}"
                    if self.gui is not None:
                        self.gui.tick(obs[0])
                    time.sleep(1.0 / self.env.control_hz)
                    next_tick = time.monotonic()
                elif self._throttled(pending):
                    for i, records in enumerate(pending):  # what the learner waits for goes now, not a message later
                        if len(records) > 1:
                            self._send(records[:-1])
                            pending[i] = records[-1:]
                    time.sleep(0.002)
                else:
                    self.clock.start()
                    try:
                        actions, extras = self._decide(obs, rng)
                        refused = ~np.isfinite(actions).reshape(len(envs), -1).all(axis=1)
                        why = "the policy gave a non-finite action"
                    except (FloatingPointError, NoAction) as e:  # a non-finite action; a policy server late
                        actions, extras, refused, why = None, {}, np.ones(len(envs), bool), str(e)
                        self._no_action_in_a_row = self._no_action_in_a_row + 1 if isinstance(e, NoAction) else 0
                        if self._no_action_in_a_row >= NO_ACTION_STOP:  # gone, not late: stop, records kept
                            raise NoAction(f"{e} ({NO_ACTION_STOP} times in a row: the actor stops)") from None
                    else:
                        self._no_action_in_a_row = 0
                    self.clock.decided()
                    for i, env in enumerate(envs):
                        if refused[i]:  # refused: env i's episode ends here, by the safety rule
                            self.refused_steps += 1
                            log.warning("refused a step of env %d (%s); its episode ends (ended_by=safety)", i, why)
                            pending[i][-1].update(truncated=True, ended_by=ENDED_BY_CODES["safety"])
                            done = True
                        else:
                            obs[i], reward, terminated, truncated, info = env.step(actions[i])
                            if info.get("dagger_handback"):  # a person handed back: its chunk predates the correction
                                self.acting.reset(i)
                            step_extras = {k: v[i] for k, v in extras.items()}
                            pending[i].append(
                                recorders[i].record_step(
                                    obs[i],
                                    reward,
                                    terminated,
                                    truncated,
                                    info,
                                    self.policy_version,
                                    time.time(),
                                    step_extras,
                                )
                            )
                            self.sent_steps += 1
                            bar.update(1)
                            if self.gui is not None:
                                self.gui.step(obs[i], reward, terminated, truncated, info)
                            done = terminated or truncated
                        if self.human is not None and self.human.estopped:
                            self.stop_reason = f"e-stop from {self.human.estopped}"
                        if done:
                            episodes += 1
                            self._send(pending[i])
                            pending[i] = []  # sent: a reset that raises (nobody acknowledged) must not send it again
                            self.transport.beat_soon()
                            self.clock.no_period()  # the reset's time is no control period
                            self._obs = obs[i]
                            # after a safety stop: waits for a human's acknowledgement
                            obs[i], _ = env.reset(options=self._reset_options)
                            self.acting.reset(i)  # a policy with per-episode state (a chunk queue) starts afresh
                            pending[i] = [
                                recorders[i].reset(obs[i], next(episode_ids), self.policy_version, time.time())
                            ]
                            if self.gui is not None:
                                self.gui.new_episode(episodes, obs[i])
                        elif len(pending[i]) > self._steps_per_message:
                            # the newest record waits for its decision: a refused one ends the episode in that record
                            self._send(pending[i][:-1])
                            pending[i] = pending[i][-1:]
                    worked = self.clock.worked()
                    if self._realtime:  # a late step moves the schedule on: no burst of commands to catch up
                        next_tick = max(next_tick + period, worked[0])
                        time.sleep(max(0.0, next_tick - time.monotonic()))
                    self.clock.slept(worked, next_tick if self._realtime else worked[0])
        except KeyboardInterrupt:
            self.stop_reason = "interrupted (Ctrl-C)"
        except SafetyStop as e:  # stopped by the safety layer and not released: every record so far is kept
            self.stop_reason = f"safety: {e}"
            log.error("the actor stops: %s", e)
        finally:
            ignore_further_interrupts()
            for records in pending:
                if records:
                    self._send(records)
            bar.close()
            if self.gui is not None:
                self.gui.close(obs[0])
            self.transport.close(self.stop_reason or "error", linger_s=self._drain_s)
            log.info("sent %d records in all", self.sent_records)  # the last word for a loss check
            for env in envs:
                env.close()
        return self.stop_reason

    def _send(self, records: list[dict]) -> None:
        env_steps = sum(r["step"] > 0 for r in records)
        batch = pack_instructions(stack_records(records, self.fields), self.tasks.names)  # its instructions travel too
        self.transport.send({"policy_version": self.policy_version}, batch, env_steps)
        self.sent_records += len(records)
