"""A learned vector per instruction of a policy's training data: the non-VLA way for one network to do several tasks.

A multi-task flow policy (`policies/flow.py`, `task_embedding` > 0) concatenates its observation features with the
embedding of the observation's instruction. The instructions it knows are the task table of its training data, kept
in its checkpoint's config in table order, so a loaded policy maps each instruction to the row it was trained with.
An instruction it was not trained on is refused by name (it has no vector to give it). An observation without one
(a learner's replay batch, which keeps only the task code) takes the configured default task (`policy.base.task`),
or the only instruction where the policy knows one.
"""

from __future__ import annotations

import torch
from torch import nn

from policies.language import task_texts
from policies.vla_checks import BaseMismatchError

MAX_WIDTH = 1024


class UnknownInstructionError(BaseMismatchError):
    """An instruction the task-conditioned policy has no embedding for (`robo-rl` prints it as a user error)."""


class TaskEmbedding(nn.Module):
    """instruction → a learned vector [width]; `instructions` is the training data's task table, in order."""

    def __init__(self, instructions: list[str], width: int) -> None:
        super().__init__()
        instructions = [str(t) for t in instructions]
        if not instructions:
            raise ValueError("a task embedding needs the training data's instructions; these have none")
        if len(set(instructions)) != len(instructions):
            raise ValueError("a task embedding's instructions must be distinct (one row per task)")
        if not 1 <= width <= MAX_WIDTH:
            raise ValueError(f"a task embedding's width must be in [1, {MAX_WIDTH}], got {width}")
        self.instructions = tuple(instructions)
        self.index = {text: i for i, text in enumerate(instructions)}
        self.table = nn.Embedding(len(instructions), width)
        self.default: str | None = None  # the task of an observation that names none

    @property
    def width(self) -> int:
        return self.table.embedding_dim

    def set_default(self, instruction: str | None) -> None:
        """The instruction an observation without one stands for (None: only a one-task policy may guess)."""
        if instruction is not None:
            self.row(instruction)  # refused now, not at the first step, if the policy does not know it
        self.default = instruction

    def row(self, instruction: str) -> int:
        """The table row of `instruction`, or UnknownInstructionError naming it and the known ones."""
        found = self.index.get(instruction)
        if found is None:
            raise UnknownInstructionError(
                f"instruction {instruction!r} is not one this policy was trained on; it knows "
                f"{len(self.instructions)}: {list(self.instructions)}"
            )
        return found

    def rows(self, obs: dict, batch: int) -> list[int]:
        """One table row per observation row: its instruction, else the default task, else the only one."""
        fallback = self.default or (self.instructions[0] if len(self.instructions) == 1 else None)
        texts = task_texts(obs, fallback, batch)
        if "" in texts:
            raise UnknownInstructionError(
                f"an observation carries no instruction and this policy was trained on {len(self.instructions)}: "
                f"{list(self.instructions)}; name the task (policy.base.task=...)"
            )
        return [self.row(text) for text in texts]

    def forward(self, obs: dict, batch: int) -> torch.Tensor:
        """[batch, width]: the embedding of each row's instruction."""
        index = torch.as_tensor(self.rows(obs, batch), dtype=torch.long, device=self.table.weight.device)
        return self.table(index)
