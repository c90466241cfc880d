"""A multi-task policy's vocabulary: `policy.encoder.task_conditioning=onehot` appends to the state features of the
actor and its critics a one-hot of the row's instruction over a fixed list of instructions (policies/encoders.py).
That list is the config's (`policy.encoder.instructions`; `robo-rl train` writes the env's into the run's
config.yaml, so a checkpoint keeps the layout its weights were trained with) or else the env's `instructions` (an
`EnvSpec` carries them to the learner), in the env's fixed order."""

from __future__ import annotations

from robo_rl.errors import UserError


class TaskVocabularyError(UserError, ValueError):
    """onehot task conditioning asked of an env that lists no instructions."""


def conditioned(policy_cfg) -> bool:
    """Whether the policy's encoder appends a one-hot of the instruction."""
    encoder = policy_cfg.get("encoder") if "encoder" in policy_cfg else None
    return bool(encoder) and encoder.get("task_conditioning", "none") == "onehot"


def env_instructions(env) -> list[str]:
    """The instructions an env (or its spec) can give, in its fixed order; TaskVocabularyError where it lists none."""
    given = list(getattr(env, "instructions", None) or ())
    if not given:
        raise TaskVocabularyError(
            "policy.encoder.task_conditioning=onehot tells the env's instructions apart, but this env lists none "
            "(env.instructions): set policy.encoder.instructions=[...], or policy.encoder.task_conditioning=none"
        )
    return given


def policy_arguments(policy_cfg, env) -> dict:
    """What a policy's builder is given beside its config: the env's (or its spec's) spaces and, where its vocabulary
    is to come from the env, its `encoder` completed with the env's instructions."""
    out = {"observation_space": env.observation_space, "action_dim": env.action_space.shape[0]}
    if conditioned(policy_cfg) and not policy_cfg.encoder.get("instructions"):
        out["encoder"] = {"instructions": env_instructions(env)}
    return out
