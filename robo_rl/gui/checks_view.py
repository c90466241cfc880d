"""The GUI server's side of the live checks (issue 52): a learned reward's score trace, its threshold and marks, each
actor's reset state, and the queue of actors waiting for a person.

Page → server (JSON, `v` 1): reward_threshold {actor, threshold}, reward_mark {actor, label: false_success |
missed_success}. Both are checked here before anything reaches an actor, and refused in one line (a `refused` reply
naming the reason) when the actor has no learned reward or the threshold is not a success probability in (0, 1);
accepted ones go to the actor as gui_reward_threshold / gui_reward_mark (robo_rl/gui/messages.py).

The queue: every actor that waits for a person now (a reset check that failed, a safety stop to acknowledge), longest
waiting first, with why: what one person supervising several actors looks at first.
"""

from __future__ import annotations

import collections
import time

from robo_rl.gui.messages import MARK_LABELS

KINDS = ("reward_threshold", "reward_mark")
TRACE = 300  # success probabilities of the running episode shown


def problem(msg: dict) -> str | None:
    """What is wrong with a page's reward_threshold / reward_mark message's fields (None: nothing)."""
    if msg["type"] == "reward_threshold":
        value = msg.get("threshold")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "'reward_threshold' needs a number 'threshold'"
    elif msg.get("label") not in MARK_LABELS:
        return f"'reward_mark' needs a 'label', one of {', '.join(MARK_LABELS)}"
    return None


def refusal(tick: dict, msg: dict) -> str | None:
    """Why this actor cannot take the check now (None: it can): no learned reward, or a threshold out of range."""
    if tick.get("reward_threshold") is None:
        what = "threshold" if msg["type"] == "reward_threshold" else "mark"
        return f"{msg['actor'][:64]} has no learned reward model: no {what} to set"
    if msg["type"] == "reward_threshold" and not 0.0 < float(msg["threshold"]) < 1.0:
        return f"threshold {msg['threshold']:g} is out of range: a success probability in (0, 1)"
    return None


def refused(actor_id: str, command: str, reason: str) -> dict:
    """The page's one-line refusal (shown in its messages)."""
    return {"v": 1, "type": "refused", "actor": actor_id, "command": command, "reason": reason}


def to_actor(msg: dict, by: str) -> tuple[str, dict]:
    """The GUI → actor message for an accepted check."""
    if msg["type"] == "reward_threshold":
        return "gui_reward_threshold", {"threshold": float(msg["threshold"]), "by": by}
    return "gui_reward_mark", {"label": msg["label"], "by": by}


class ChecksState:
    """Per actor on the server: the running episode's success probabilities and since when it waits for a person."""

    def __init__(self) -> None:
        self.scores: collections.deque = collections.deque(maxlen=TRACE)
        self.waiting_since: float | None = None
        self._at: tuple | None = None  # (episode, step) of the last score kept

    def on_tick(self, meta: dict) -> None:
        at = (meta["episode"], meta["step"])
        if self._at is None or at[0] != self._at[0] or at[1] < self._at[1]:
            self.scores.clear()
        if at[1] > 0 and at != self._at:
            prob = meta.get("success_prob")
            self.scores.append(None if prob is None else float(prob))
        self._at = at
        waiting = _why_waiting(meta) is not None
        if not waiting:
            self.waiting_since = None
        elif self.waiting_since is None:
            self.waiting_since = time.time()

    def fields(self, tick: dict) -> dict:
        """The snapshot's fields for the page."""
        return {
            "scores": list(self.scores),
            "reward_threshold": tick.get("reward_threshold"),
            "reward_debounce_k": tick.get("reward_debounce_k"),
            "reward_model_version": tick.get("reward_model_version"),
            "reward_marks": tick.get("reward_marks"),
            "reset_state": tick.get("reset_state"),
            "reset_why": tick.get("reset_why"),
            "reset_counts": tick.get("reset_counts", {}),
            "waiting_why": _why_waiting(tick),
            "waiting_since": self.waiting_since,
        }


def _why_waiting(tick: dict) -> str | None:
    if tick.get("reset_state") == "waiting":
        return "reset: " + (tick.get("reset_why") or "a person must reset the scene")
    if tick.get("mode") == "SAFETY":
        return tick.get("safety") or "a safety stop to acknowledge"
    return None


def queue(actors) -> list[dict]:
    """The actors waiting for a person, longest first: [{actor, why, since}]."""
    waiting = [
        {"actor": a.id, "why": _why_waiting(a.tick), "since": a.checks.waiting_since}
        for a in actors
        if a.checks.waiting_since is not None and _why_waiting(a.tick)
    ]
    return sorted(waiting, key=lambda w: w["since"])
