"""The instruction a language-reading policy gets: the observation's own where it has one, else the configured task.

An env whose task has an instruction puts it in its observation under "instruction" (one str); a batch of
observations carries one per row (a list, None for a row without). Policies that read no language ignore the key.
"""

from __future__ import annotations

INSTRUCTION = "instruction"


def task_texts(obs: dict, default: str | None, rows: int) -> list[str]:
    """One task text per row: the row's instruction where the observation has one, else `default` (or "")."""
    given = obs.get(INSTRUCTION)
    if given is None or isinstance(given, str):
        given = [given] * rows
    if len(given) != rows:
        raise ValueError(f"the observation has {len(given)} instructions for {rows} rows")
    return [text if text is not None else (default or "") for text in given]


def instruction_rows(observations: list[dict]) -> dict:
    """{"instruction": [one per observation]} where any of them has one, else {} (a batch without the key)."""
    texts = [o.get(INSTRUCTION) for o in observations]
    return {INSTRUCTION: texts} if any(t is not None for t in texts) else {}


def instruction_row(obs: dict, i: int) -> dict:
    """Row `i`'s instruction of a batch of observations, as {"instruction": str}, or {} where it has none."""
    texts = obs.get(INSTRUCTION)
    text = None if texts is None else texts[i]
    return {} if text is None else {INSTRUCTION: text}


def instruction_subset(obs: dict, rows) -> dict:
    """The instructions of the given rows (an index array or tensor, a list or a slice) of a batch of observations,
    as {"instruction": [...]}, or {} where the batch carries none (what `obs_rows` and a base's call keep)."""
    texts = obs.get(INSTRUCTION)
    if texts is None:
        return {}
    if isinstance(rows, slice):
        return {INSTRUCTION: texts[rows]}
    index = rows.tolist() if hasattr(rows, "tolist") else rows if isinstance(rows, int) else list(rows)
    if isinstance(index, int):  # one row, unbatched: its instruction as an observation holds it
        return {} if texts[index] is None else {INSTRUCTION: texts[index]}
    return {INSTRUCTION: [texts[i] for i in index]}


def instructions_repeated(obs: dict, n: int) -> dict:
    """Each row's instruction `n` times in a row (as `repeat_interleave(n)` repeats the tensors), or {}."""
    texts = obs.get(INSTRUCTION)
    return {} if texts is None else {INSTRUCTION: [t for t in texts for _ in range(n)]}
