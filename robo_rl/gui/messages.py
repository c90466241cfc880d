"""The messages between actors and the GUI process (ZeroMQ, msgpack through `robo_rl.transport.codec`), checked
field by field like the transport's (`robo_rl.transport.messages`): a GUI is one more stranger on a socket.

actor → GUI (the actor's DEALER, identity = its id, to the GUI's ROUTER):
  gui_tick     the actor's state after a step (or while paused): mode, who controls, episode, step, reward, the
               policy version, loop and learner figures; camera frames ride along as uint8 arrays `cam/<name>`
               (and `view/<name>` for a larger rendered view) at most `gui.frame_hz` times a second
               (with a learned reward: its threshold, debounce and model version, the marks saved; with env.reset_mode:
               the reset state, why it waits for a person, the reset counts)
  gui_episode  a finished episode: how it ended, its length, return and intervention steps
GUI → actor:
  gui_command  a button: intervention_toggle, success, failure, rerecord_episode, terminate_episode, pause, estop,
               acknowledge (a safety stop)
  gui_key      a key of the page, down or up (the keyboard's key table interprets it, `robo_rl.teleop.keys`)
  gui_release  the operator who held control is gone: hand control back
  gui_deadman  no page watches any more (or the controlling one went away): the actor's dead-man policy applies
  gui_presence the GUI is there, with how many pages watch (sent a few times a second; its silence is a dead-man)
  gui_reward_threshold  a new success threshold for the actor's learned reward, applied between steps
  gui_reward_mark       label the actor's last frames: a false success or a missed success (robo_rl/rewards/live.py)
"""

from __future__ import annotations

from robo_rl.transport.messages import _actor_id, _bool, _int, _number, _stats, _text, check_meta

MODES = ("POLICY", "HUMAN", "PAUSED", "ESTOP", "SAFETY")
COMMANDS = (
    "intervention_toggle",
    "success",
    "failure",
    "rerecord_episode",
    "terminate_episode",
    "pause",
    "estop",
    "acknowledge",
)
MAX_TIMELINE = 1000
RESET_STATES = ("running", "resetting", "checking", "waiting")  # waiting: for a person (`reset_why` says why)
MARK_LABELS = ("false_success", "missed_success")


def _optional(check):
    return lambda v: None if v is None else check(v)


def _one_of(options):
    return lambda v: None if v in options else f"one of {', '.join(options)}"


def _timeline(v):
    if not isinstance(v, list) or len(v) > MAX_TIMELINE:
        return f"a list of at most {MAX_TIMELINE} [start, end, device] entries"
    for entry in v:
        if (
            not isinstance(entry, list | tuple)
            or len(entry) != 3
            or _int(0)(entry[0])
            or (entry[1] is not None and _int(0)(entry[1]))
            or _text(128)(entry[2])
        ):
            return "a list of [start, end or null, device] entries"
    return None


SCHEMAS: dict[str, dict[str, tuple]] = {
    "gui_tick": {
        "actor": (_actor_id, True),
        "t": (_number, True),
        "mode": (_one_of(MODES), True),
        "controller": (_optional(_text(128)), False),
        "policy_version": (_int(), True),
        "policy_age_s": (_optional(_number), False),
        "episode": (_int(0), True),
        "step": (_int(0), True),
        "reward": (_number, True),
        "return": (_number, True),
        "success_prob": (_optional(_number), False),
        "interventions": (_timeline, False),
        "loop": (_stats, False),
        "learner": (_stats, False),
        "notice": (_optional(_text(200)), False),  # something the operator should know (a learned reward down)
        "safety": (_optional(_text(300)), False),  # the safety layer: why the arm is stopped, or what it clipped
        "safety_counts": (_stats, False),
        "reward_threshold": (_optional(_number), False),  # absent or null: no learned reward on this actor
        "reward_debounce_k": (_optional(_int(1)), False),
        "reward_model_version": (_optional(_int(0)), False),
        "reward_marks": (_optional(_int(0)), False),
        "reset_state": (_optional(_one_of(RESET_STATES)), False),
        "reset_why": (_optional(_text(200)), False),
        "reset_counts": (_stats, False),
    },
    "gui_episode": {
        "actor": (_actor_id, True),
        "episode": (_int(0), True),
        "success": (_bool, True),
        "ended_by": (_text(64), True),
        "length": (_int(0), True),
        "return": (_number, True),
        "intervention_steps": (_int(0), True),
    },
    "gui_command": {"command": (_one_of(COMMANDS), True), "by": (_text(128), False)},
    "gui_key": {"key": (_text(32), True), "down": (_bool, True)},
    "gui_release": {"by": (_text(128), False)},
    "gui_deadman": {"reason": (_text(), True)},
    "gui_presence": {"pages": (_int(0), True)},
    "gui_reward_threshold": {"threshold": (_number, True), "by": (_text(128), False)},
    "gui_reward_mark": {"label": (_one_of(MARK_LABELS), True), "by": (_text(128), False)},
}
TO_GUI = ("gui_tick", "gui_episode")
TO_ACTOR = (
    "gui_command",
    "gui_key",
    "gui_release",
    "gui_deadman",
    "gui_presence",
    "gui_reward_threshold",
    "gui_reward_mark",
)


def check(kind: str, meta: dict, accepted: tuple[str, ...]) -> None:
    """Raise MessageError unless `kind` is accepted here and its fields have the listed types."""
    check_meta(kind, meta, accepted, SCHEMAS)
