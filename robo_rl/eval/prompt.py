"""The human prompt of an evaluation on a real robot: a person resets the scene between episodes and answers with a
device's success button or Enter (or the intervention page's buttons, robo_rl/gui/eval_view.py)."""

from __future__ import annotations

import queue
import sys
import threading
import time

from robo_rl.eval.conditions import PromptError

PROMPT_POLL_S = 0.05  # how often devices are read while a prompt waits for a person


class EvaluationStopped(Exception):
    """A person or the safety layer ended the evaluation early; the episodes so far are reported."""


def human_devices(env) -> list:
    """The started teleop devices of the env's human wrapper (none when it has none)."""
    while env is not None:
        if isinstance(getattr(env, "devices", None), list):
            return env.devices
        env = getattr(env, "env", None)
    return []


class HumanPrompt:
    """A person's answer: a teleop device's success / failure button, or a line typed on stdin (read on a thread,
    so the devices are polled meanwhile; nothing blocks on `input()`)."""

    def __init__(self, devices=(), lines=None, say=print, poll_s: float = PROMPT_POLL_S) -> None:
        self.devices, self.say, self.poll_s = list(devices), say, poll_s
        self.gui = None  # the intervention page (robo_rl/gui/eval_view.py): it shows the prompt while we wait
        self._lines: queue.Queue = queue.Queue()
        source = lines if lines is not None else sys.stdin
        self._open = source is not None and not getattr(source, "closed", False)
        if self._open:
            threading.Thread(target=self._read, args=(source,), name="eval-prompt", daemon=True).start()

    def _read(self, source) -> None:
        try:
            for line in source:
                self._lines.put(line.strip().lower())
        except (OSError, ValueError):  # stdin closed under us
            pass
        self._lines.put(None)

    def _answer(self, events: tuple[str, ...], words: dict[str, str], text: str = "") -> str:
        while True:
            if self.gui is not None:
                self.gui.waiting(text)
            for device in self.devices:
                seen = device.read().events
                hit = next((e for e in events if e in seen), None)
                if hit is not None:
                    return hit
            if not self._open and not self.devices:
                raise PromptError(
                    "a person's answer is needed, but stdin is closed and no teleop device is "
                    "configured: run in a terminal, or give human=<device>"
                )
            try:
                line = self._lines.get(timeout=self.poll_s) if self._open else time.sleep(self.poll_s)
            except queue.Empty:
                continue
            if line is None:
                self._open = False
            elif line in words:
                return words[line]
            elif self._open:
                self.say(f"  answer with {' / '.join(repr(w) if w else 'Enter' for w in words)}")

    def wait_for_reset(self, text: str) -> None:
        self.say(text)
        self._answer(("success",), {"": "success"}, text)

    def ask_label(self, text: str) -> bool:
        self.say(text)
        answer = self._answer(
            ("success", "failure"), {"y": "success", "s": "success", "n": "failure", "f": "failure"}, text
        )
        return answer == "success"
