"""A LeRobot checkpoint refused before it acts, in one line: actions of another size, an instruction its tokenizer
would cut. `robo-rl` prints a `BaseMismatchError` as a user error (robo_rl/cli.py's POLICY_ERRORS): policies never
import robo_rl, so it cannot derive from robo_rl.errors.UserError itself."""

from __future__ import annotations

TOKENIZER_STEP = "TokenizerProcessorStep"
NEWLINE_STEP = "NewLineTaskProcessorStep"  # SmolVLA's pre-processor ends the task with "\n" before tokenising


class BaseMismatchError(ValueError):
    """A base checkpoint that does not fit the task (its action size) or its instruction (too long to tokenise)."""


def instruction_tokens(preprocessor, task: str) -> tuple[int, int] | None:
    """(tokens of `task` as the pre-processor tokenises it, its tokenizer's max_length); None where it has no
    tokenizer step (a policy that reads no language)."""
    steps = list(getattr(preprocessor, "steps", ()))
    names = [type(s).__name__ for s in steps]
    if TOKENIZER_STEP not in names:
        return None
    step = steps[names.index(TOKENIZER_STEP)]
    if NEWLINE_STEP in names[: names.index(TOKENIZER_STEP)] and not task.endswith("\n"):
        task += "\n"
    tokenizer = step.input_tokenizer
    return len(tokenizer(task, add_special_tokens=True)["input_ids"]), int(step.max_length)


def check_instruction_fits(preprocessor, task: str, name: str) -> None:
    """Refuse an instruction longer than the tokenizer's max_length: lerobot's tokenizer step would cut it silently
    and the policy would act on a prefix of it."""
    counted = instruction_tokens(preprocessor, task)
    if counted is not None and counted[0] > counted[1]:
        raise BaseMismatchError(
            f"instruction '{task[:60]}{'...' if len(task) > 60 else ''}' is {counted[0]} tokens, base {name} reads "
            f"at most {counted[1]} (its tokenizer_max_length): shorten the instruction or train with a longer limit"
        )
