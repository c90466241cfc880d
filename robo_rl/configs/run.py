"""The run's own blocks (`train`, `replay`, `demos`, `actor`, `hardware`, `guards`, and the groups `transport` and
`logger`): one typed field per setting, with its default, range and meaning, the only place they are written.
`launch/conf/config.yaml` does not repeat them; an experiment's YAML, or a group's option, sets what differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_rl.configs.typed import FIXED, setting


@dataclass
class TrainConfig:
    """The learner's budget and rhythm."""

    total_env_steps: int = setting(20000, "online env steps after which the learner stops the run", low=1)
    learning_starts: int = setting(500, "online steps collected before the first update", low=0)
    random_steps: int = setting(0, "first online steps taken with uniform random actions", low=0)
    utd: float = setting(
        1.0, "critic updates per received env step (update-to-data ratio), the learner keeps it", above=0, high=1000
    )
    weights_every_updates: int = setting(50, "publish the policy to actors every this many updates", low=1)
    checkpoint_every_env_steps: int = setting(5000, "write a checkpoint every this many env steps", low=1)
    checkpoint_every_s: float = setting(
        120.0,
        "also write one this often (if data came), s, whichever is first: a learner crash loses at most 2 minutes "
        "of the robot's learning (5000 steps take 8 min at 10 Hz); its data is stored either way",
        above=0,
    )
    learner_nice: int | None = setting(
        None,
        "the learner process's CPU niceness, 0 (full priority) to 19; null: 10 when the actors run in real time "
        "(actor.realtime=true: a robot's control loop on this machine keeps the cores, the learner takes what is "
        "left and logs the UTD it reached), else 0",
        low=0,
        high=19,
    )
    actors: int = setting(
        1, "sim actor processes `robo-rl train` starts (actor-0, actor-1, ..., each its own seed)", low=1, high=64
    )
    actor_tasks: str = setting(
        "episode",
        "a multi-task env's tasks across those actors: episode (each draws a task per episode) | split (actor i "
        "runs only the env's task i mod the number of tasks, via actor.task)",
        choices=("episode", "split"),
    )


@dataclass
class ReplayConfig:
    """The learner's replay: where batches come from, how received records reach disk, the online/prior mix."""

    storage: str = setting(
        "ram",
        "where batches are sampled from: ram (a RAM ring of `capacity` records) | disk (the segment files)",
        choices=("ram", "disk"),
    )
    capacity: int = setting(200000, "records in the RAM ring (storage=ram)", low=1)
    disk_capacity: int = setting(
        10000000, "records sampled from disk (storage=disk); frames stay on disk, links in RAM", low=1
    )
    persist: bool = setting(True, "write every online record to <run>/replay/online/, ack actors only once it is there")
    flush_every_s: float = setting(2.0, "how often received records are written (a segment file each time), s", above=0)
    segment_max_mb: float = setting(256, "write a segment sooner when this many MB are waiting", above=0)
    online_fraction: float = setting(
        0.5, "share of each batch from online data; the rest from demos + interventions", low=0, high=1
    )
    interventions_in_prior: bool = setting(True, "human-intervention transitions join the demonstrations as prior data")
    warmup_episodes: int = setting(
        0,
        "WSRL's warm-up: no update until this many online episodes of the initial (pretrained) policy are in the "
        "replay, then train.utd updates per env step after them (0: none; train.learning_starts holds either way); "
        "with online_fraction=1 no batch holds a prior row (experiment=wsrl_pick_cube)",
        low=0,
    )
    verify_on_load: bool = setting(True, "check every segment's checksums when resuming")


@dataclass
class DemosConfig:
    """The prior data mixed into each batch (RLPD) and a BC base's demonstrations."""

    path: str | None = setting(
        None,
        "prior data from a dataset (replay store, LeRobot dataset, robomimic .hdf5) instead of the scripted expert; "
        "see robo-rl data",
    )
    num_episodes: int = setting(20, "scripted-expert demonstrations, mixed into each batch (RLPD)", low=0)
    noise_std: float = setting(0.1, "std of the Gaussian noise on the scripted expert's actions", low=0)
    seed: int = setting(100000, "env seed of the first demonstration (then +1, ...)", low=0)
    randomize: bool = setting(
        True,
        "record the scripted demonstrations under env.randomize; false: on the nominal env (an expert that cannot "
        "act under the randomised latency), while training still sees env.randomize",
    )
    randomize_keep: tuple[str, ...] = setting(
        (),
        "with randomize=false, the env.randomize keys the demonstrations still vary (ones the expert handles, "
        "e.g. [object_size_scale]); the others are nominal",
    )


@dataclass
class ActorConfig:
    """One actor process: its name, how it talks to the learner, when it takes weights, what wraps its env."""

    id: str = setting("actor-0", "this actor's name (and its CURVE key's)")
    steps_per_message: int = setting(10, "records batched into one data message", low=1)
    throttle_to_learner: bool = setting(
        True, "in sim, wait for the learner to keep the realised UTD (off on a real robot)"
    )
    max_lead_steps: int = setting(100, "how far the actor may run ahead of the learner's UTD budget, steps", low=0)
    heartbeat_every_s: float = setting(0.5, "actor heartbeat period, s", above=0)
    apply_weights: str = setting(
        "step",
        "when new weights are taken: step (between steps) | episode (only at episode boundaries)",
        choices=("step", "episode"),
    )
    hello_timeout_s: float = setting(15, "how long the actor waits for the learner's reply to its hello, s", above=0)
    learner_wait_s: float = setting(
        600, "when the learner stops before the run is done, hold this long for it to come back, s", low=0
    )
    drain_s: float = setting(
        30,
        "on stopping, how long the actor waits for the learner (while it is there) to confirm it stored every record "
        "sent, s: a learner behind busy actors takes seconds; what it never confirms is lost",
        low=0,
    )
    realtime: bool = setting(False, "sleep to hold env.control_hz (true on hardware)")
    chunking: str = setting(
        "sync",
        "a chunked policy's next chunk: sync (computed when the last is used up: the loop waits) | async (on a "
        "thread from the newest observation while the current chunk runs, its delay compensated) | rtc (async, and "
        "agreeing with the actions already committed: real-time chunking)",
        choices=("sync", "async", "rtc"),
    )
    inference_delay_steps: int | None = setting(
        None,
        "async/rtc: the control steps a chunk's inference is taken to last (a simulation given a robot's delay); "
        "null: measured, the slow end of recent inferences against env.control_hz",
        low=1,
    )
    num_envs: int = setting(
        1,
        "simulated envs stepped together by this actor, one batched policy call a step (on-policy runs: reinflow, "
        "dppo; also sac); a robot is one env per actor",
        low=1,
        high=256,
    )
    task: str | None = setting(
        None,
        "a multi-task env's task name (env.tasks) this actor runs every episode, reset with options={task: name} "
        "(null: the env draws one per episode); the learner keeps the env's whole task vocabulary",
    )
    wrappers: tuple[str, ...] = setting(
        ("safety", "human", "reward"),
        "config nodes wrapped around the env, innermost first (an empty node is skipped): the safety layer checks "
        "the human's commands too",
    )


@dataclass
class HardwareConfig:
    """A robot env's run-time switches."""

    dry_run: bool = setting(
        False, "a robot env's config with its commands sent to the arm's MuJoCo twin (no metal moves)"
    )
    calibration: str | None = setting(
        None, "a file from robo-rl calibrate: its workspace box and home pose join this config"
    )


PORT = {"low": 1, "high": 65535}


@dataclass
class TransportConfig:
    """Actor <-> learner sockets (launch/conf/transport/local.yaml: both on one machine, loopback binds)."""

    host: str = setting("127.0.0.1", "the learner's address, as actors reach it (off loopback: CURVE keys)")
    data_port: int = setting(5555, "actor -> learner transitions (PUSH/PULL)", **PORT)
    weights_port: int = setting(5556, "learner -> actor weights (PUB/SUB)", **PORT)
    ctrl_port: int = setting(5557, "hello, heartbeat and stats (DEALER/ROUTER)", **PORT)
    curve_keys_dir: str | None = setting(
        None, "a `robo-rl keys generate` folder to authenticate with (required off loopback)"
    )
    actor_timeout_s: float = setting(
        3.0, "the learner marks an actor lost after this long without a heartbeat, s", above=0
    )
    learner_timeout_s: float | None = setting(
        None,
        "an actor holds (the robot at rest, its records kept for resend) after this long without a word from the "
        "learner, s; null: 3, or 30 when the learner runs below the actors' CPU priority (train.learner_nice): the "
        "control loops keep such a learner waiting, and it is busy, not gone",
        above=0,
    )
    shared_memory_weights: bool = setting(
        True, "actors on the learner's machine read new weights from /dev/shm instead of TCP"
    )
    max_message_mb: float = setting(64, "the learner drops (and counts) larger data messages, MB", above=0)
    max_held_mb: float = setting(
        1024,
        "per actor: copies of received, not yet durable messages the learner holds to compare a resend, MB",
        above=0,
    )
    receive_queue_messages: int = setting(
        16, "data messages queued per connected actor: the learner's memory for them is this x the size", low=1
    )


@dataclass
class LoggerConfig:
    """Logs and metrics: metrics.jsonl always, plus a dashboard backend (logger=tensorboard | logger=wandb); the
    backends' own settings are read only when that backend is chosen."""

    backend: str = setting(
        "jsonl", "where metrics go besides metrics.jsonl: jsonl (nowhere) | tensorboard | wandb (robo_rl/loggers.py)"
    )
    progress: bool = setting(True, "live progress bars (off for processes started by `train`, which shows its own)")
    log_every_s: float = setting(2.0, "learner metrics are logged this often, s", above=0)
    level: str = setting("INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    flush_every_s: float = setting(10.0, "tensorboard: event files are written to disk this often, s", above=0)
    project: str = setting("robo_rl", "wandb: the W&B project")
    entity: str | None = setting(None, "wandb: your W&B user or team (null: your default entity)")
    group: str | None = setting(None, "wandb: the W&B group, e.g. the experiment name, to group seeds")
    mode: str | None = setting(
        None, "wandb: online | offline | disabled (null: the WANDB_MODE environment variable, else online)"
    )


@dataclass
class GuardsConfig:
    """The learner's checks that a run is measuring something (robo_rl/algos/guards.py): each logged as a metric,
    warned once with its figures and written into the run's report."""

    q_margin: float = setting(
        0.5,
        "Q may leave the return's possible range [r_min, r_max]/(1-gamma) by this share of its width (at least 1)",
        low=0,
    )
    base_epsilon: float = setting(
        1e-4, "an actor whose mean |action - base action| stays below this is flagged as never leaving its base", low=0
    )
    base_updates: int = setting(1000, "actor updates the base check looks back over", low=1)
    reward_disagreement: float = setting(
        0.3,
        "a learned reward whose success disagrees with the simulator's on more than this share is flagged",
        low=0,
        high=1,
    )
    reward_episodes: int = setting(
        50, "episodes (with both successes recorded) the reward check looks back over", low=1
    )
    success_within_episodes: int = setting(
        200, "online episodes after which a replay with no success is flagged", low=1
    )


BLOCKS: dict[str, dict[str | None, type]] = {
    prefix: {FIXED: cls}
    for prefix, cls in (
        ("train", TrainConfig),
        ("replay", ReplayConfig),
        ("demos", DemosConfig),
        ("actor", ActorConfig),
        ("hardware", HardwareConfig),
        ("transport", TransportConfig),
        ("logger", LoggerConfig),
        ("guards", GuardsConfig),
    )
}


# --- values that follow from several settings -------------------------------------------------------------------------
REALTIME_LEARNER_NICE = 10  # below a real-time actor's control loop; the same as a reward retrain's
LEARNER_TIMEOUT_S = 3.0
NICED_LEARNER_TIMEOUT_S = 30.0  # a learner at niceness 10 beside busy actors fell silent for 4-6 s (2026-11-30)


def learner_niceness(cfg) -> int:
    """train.learner_nice, or when unset: REALTIME_LEARNER_NICE beside real-time actors, else 0 (full priority)."""
    if cfg.train.learner_nice is not None:
        return int(cfg.train.learner_nice)
    return REALTIME_LEARNER_NICE if cfg.actor.realtime else 0


def learner_timeout_s(cfg) -> float:
    """How long an actor waits for a word from the learner before it holds (transport.learner_timeout_s)."""
    if cfg.transport.learner_timeout_s is not None:
        return float(cfg.transport.learner_timeout_s)
    return NICED_LEARNER_TIMEOUT_S if learner_niceness(cfg) > 0 else LEARNER_TIMEOUT_S
