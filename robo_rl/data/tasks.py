"""The run's task table: each distinct instruction once; a record's `task` is 1 + its index (0: no instruction).

An observation's "instruction" is a string, the same for a whole episode, so it is not stored per step: a
`TaskTable` gives it an index the first time it is seen, and the record's `task` field holds 1 + that index (0, as in a
zero-filled record, where the task has none; `ended_by` counts the same way).
On the wire a step batch carries its own small table (`pack_instructions`): the instructions its records use,
UTF-8 and NUL-separated in one uint8 array, and its `task` column holds codes into that list (a demonstration
cache is kept the same way); the learner checks each instruction and maps it into the run's table
(`unpack_instructions`), so every message stands alone (a resend, a restarted learner, many actors) and nothing but
plain bytes crosses the wire.
"""

from __future__ import annotations

import numpy as np

NO_TASK = 0  # the record's env gave no instruction
MAX_INSTRUCTION = 1000  # characters in one instruction
MAX_TASKS = 4096  # distinct instructions in one run
INSTRUCTIONS = "instructions"  # the wire's array holding a step batch's own instructions
_SEPARATOR = b"\x00"


def check_instruction(text) -> str:
    """`text` if it is a usable instruction, else ValueError naming the problem."""
    if not isinstance(text, str):
        raise ValueError(f"an instruction must be a str, got {type(text).__name__}")
    if not 0 < len(text) <= MAX_INSTRUCTION:
        raise ValueError(f"an instruction must have 1-{MAX_INSTRUCTION} characters, got {len(text)}")
    if not text.isprintable():
        raise ValueError(f"instruction {text[:40]!r} holds control characters")
    return text


class TaskTable:
    """instruction → index, append-only, so an index once given never changes meaning."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        for name in names or []:
            self.code(name)

    def __len__(self) -> int:
        return len(self.names)

    def code(self, instruction: str | None) -> int:
        """The `task` code of `instruction`: 1 + its index (added if new), or NO_TASK for None."""
        if instruction is None:
            return NO_TASK
        found = self._index.get(instruction)
        if found is not None:
            return found + 1
        check_instruction(instruction)
        if len(self.names) >= MAX_TASKS:
            raise ValueError(f"the run's task table is full ({MAX_TASKS} distinct instructions)")
        self._index[instruction] = len(self.names)
        self.names.append(instruction)
        return len(self.names)

    def name(self, code: int) -> str | None:
        """The instruction a `task` code stands for (None for NO_TASK)."""
        return None if code == NO_TASK else self.names[code - 1]


def instruction_of(obs: dict) -> str | None:
    """An observation's instruction, or None where its task has none."""
    return obs.get("instruction")


def encode_instructions(names: list[str]) -> np.ndarray:
    """Instructions as the uint8 array a step batch carries them in (UTF-8, NUL-separated)."""
    return np.frombuffer(_SEPARATOR.join(check_instruction(n).encode() for n in names), np.uint8).copy()


def decode_instructions(raw) -> list[str]:
    """The instructions of a step batch's INSTRUCTIONS array; ValueError unless each is usable text."""
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError(f"'{INSTRUCTIONS}' must be uint8[n] (UTF-8 text)")
    try:
        return [check_instruction(part.decode()) for part in raw.tobytes().split(_SEPARATOR)]
    except UnicodeDecodeError:
        raise ValueError(f"'{INSTRUCTIONS}' is not UTF-8 text") from None


def pack_instructions(batch: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """The step batch made self-describing (as it travels, and as demonstrations are cached): `task` re-indexed
    from the table `names` into the batch's own instructions, which ride along in one uint8 array (absent when
    no record has an instruction)."""
    task = batch["task"]
    named = task != NO_TASK
    if not named.any():
        return batch
    used = np.unique(task[named])
    local = np.full_like(task, NO_TASK)
    local[named] = 1 + np.searchsorted(used, task[named])
    return {**batch, "task": local, INSTRUCTIONS: encode_instructions([names[i - 1] for i in used.tolist()])}


def unpack_instructions(arrays: dict, table: TaskTable) -> None:
    """Map a self-describing batch's `task` column from its own instructions into `table` (the run's), in place, so
    every later reader of the dict sees the run's indices. Raises ValueError, adding nothing to the table, when an
    instruction is not UTF-8 text of 1-MAX_INSTRUCTION printable characters or an index points past the list."""
    raw = arrays.pop(INSTRUCTIONS, None)
    task = arrays.get("task")
    if not isinstance(task, np.ndarray) or task.dtype != np.int32:
        return  # the batch's field check names the missing or mistyped field (before any name enters the table)
    names = [] if raw is None else decode_instructions(raw)
    if task.size and (task.min() < NO_TASK or task.max() > len(names)):
        raise ValueError(f"a record's task code is outside [0, {len(names)}] (the batch's instructions)")
    if len(set(names) - set(table.names)) + len(table) > MAX_TASKS:
        raise ValueError(f"the run's task table is full ({MAX_TASKS} distinct instructions)")
    mapping = np.array([NO_TASK] + [table.code(name) for name in names], np.int32)
    arrays["task"] = mapping[task].astype(task.dtype)


def with_row_instructions(batch: dict) -> dict:
    """A self-describing batch (a demonstration cache) with each record's instruction beside it under "instruction"
    (an object array of str, None where it has none: it splits and joins with the records), for what runs a base on
    its records before the replay maps its codes (an algorithm's `relabel_prior`); the batch as it is where none has
    one."""
    raw = batch.get(INSTRUCTIONS)
    if raw is None or "task" not in batch:
        return batch
    names, codes = [None, *decode_instructions(raw)], np.asarray(batch["task"])
    if codes.size and (codes.min() < NO_TASK or codes.max() >= len(names)):
        return batch  # the replay's check refuses it, naming the problem
    return {**batch, "instruction": np.array([names[c] for c in codes.tolist()], dtype=object)}
