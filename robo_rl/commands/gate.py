"""`robo-rl gate <current> <candidate> data=<run or dataset>`: RL-100's offline-evaluation gate on two checkpoints.

Each checkpoint is what `robo-rl eval` takes (a run folder or its checkpoints/step_N.pt, loaded with the run's own
config) or a `robo-rl bc` file (<run>/bc/policy.pt: an MLP, flow or diffusion policy acting in its chunks). The data is
any episodes `robo-rl data` reads (a run folder, a replay store, a LeRobot dataset). The decision goes to the console
and, as a JSON line, to `log=` (default: gate.jsonl in the data's folder). Exit status 0: accepted, 1: rejected.
"""

from __future__ import annotations

from pathlib import Path

from robo_rl.commands.common import UsageError
from robo_rl.configs.parl import GateConfig
from robo_rl.configs.typed import settings_of

USAGE = (
    "usage: robo-rl gate <current checkpoint> <candidate checkpoint> data=<run or dataset> [log=<file>] "
    f"[{' | '.join(f'{k}=' for k in settings_of(GateConfig))}] [config overrides for the sim check]"
)


class BaseActing:
    """A `robo-rl bc` checkpoint as an acting policy: its chunks run open-loop, a generative one's noise reseeded at
    every episode start (the same observation, the same chunk)."""

    def __init__(self, base) -> None:
        from policies.base import ChunkedBase

        self.chunked = ChunkedBase(base)
        self.execute_steps = self.chunked.execute_steps

    def reset(self, slot=None) -> None:
        self.chunked.reset()
        getattr(self.chunked.base, "reseed", lambda seed: None)(0)

    def act(self, obs: dict, deterministic: bool = False):
        import torch

        from policies.residual import observation_row

        return torch.as_tensor(self.chunked.act(observation_row(obs, 0)), dtype=torch.float32)[None]


def _run_dir_of(path: Path) -> Path | None:
    if path.is_dir():
        return path
    if path.parent.name in ("checkpoints", "bc", "distill"):
        return path.parent.parent
    return None


def load_acting(arg: str, episodes, overrides: list[str]):
    """(the acting policy of a checkpoint, the config of its run folder or None)."""
    from robo_rl.config import load_config, load_saved_config, make_policy

    path = Path(arg)
    if not path.exists():
        raise UsageError(f"checkpoint {path} does not exist: pass a run folder, a step_N.pt or a bc/policy.pt")
    run_dir = _run_dir_of(path)
    cfg = None
    if run_dir is not None and (run_dir / "config.yaml").is_file():
        cfg = load_saved_config(run_dir / "config.yaml", overrides)
    if path.is_file() and path.parent.name != "checkpoints":  # a `robo-rl bc` (or distill) policy file
        from policies.bc import load_bc_base
        from robo_rl.offline.fqe import observation_space_of

        action_dim = episodes[0].records["action_executed"].shape[1]
        return BaseActing(load_bc_base(path, observation_space_of(episodes), action_dim)), cfg
    from robo_rl.envs.spec import SPEC_FILE, read_spec
    from robo_rl.runs import CheckpointError, load_newest_readable

    payload, _ = load_newest_readable(path)
    cfg = cfg if cfg is not None else load_config(overrides)
    spec = read_spec(run_dir / SPEC_FILE) if run_dir and (run_dir / SPEC_FILE).is_file() else None
    if spec is None:
        raise UsageError(f"{path}: its run folder has no {SPEC_FILE} (the task's spaces): pass the run folder")
    policy = make_policy(cfg, spec)
    try:
        policy.load_state_dict(payload["algo"]["policy"])
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(f"checkpoint {payload['path']} does not fit its run's policy ({str(e)[:120]})") from None
    return policy.eval(), cfg


def cmd_gate(args: list[str]) -> int:
    positional = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    if len(positional) != 2 or "data" not in options:
        raise UsageError(f"gate needs two checkpoints and data=<run or dataset>\n{USAGE}")
    import yaml

    from robo_rl.offline.gate import gate, gate_config

    fields = settings_of(GateConfig)
    cfg = gate_config({k: yaml.safe_load(v) for k, v in options.items() if k in fields})  # bad ones: one line
    overrides = [f"{k}={v}" for k, v in options.items() if k not in (*fields, "data", "log")]
    from robo_rl.data.datasets.io import load_episodes

    try:
        episodes = load_episodes(options["data"], progress=False)
    except (ValueError, OSError) as e:
        raise UsageError(f"data={options['data']}: {e}") from None
    if not episodes:
        raise UsageError(f"data={options['data']} holds no episodes")
    current, current_cfg = load_acting(positional[0], episodes, overrides)
    candidate, candidate_cfg = load_acting(positional[1], episodes, overrides)
    run_cfg = candidate_cfg or current_cfg
    import torch

    torch.set_num_threads(int(run_cfg.torch_threads) if run_cfg is not None else 1)
    env = None
    if cfg.eval_episodes > 0:
        if run_cfg is None:
            raise UsageError("eval_episodes > 0 runs both policies in the sim: give a checkpoint inside a run folder")
        from robo_rl.eval.episodes import make_eval_env

        env = make_eval_env(run_cfg)
    data = Path(options["data"])
    log = Path(options.get("log") or (data if data.is_dir() else data.parent) / "gate.jsonl")
    try:
        line = gate(
            current,
            candidate,
            episodes,
            cfg,
            log,
            env,
            (positional[0], positional[1]),
            int(run_cfg.eval.seed) if run_cfg is not None else 0,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if env is not None:
            env.close()
    relation = ">" if line["accepted"] else "<="
    print(
        f"FQE on {line['held_out_episodes']} held-out episodes: candidate {line['candidate_estimate']:.3f}, "
        f"current {line['current_estimate']:.3f}; gain {line['gain']:.3f} {relation} margin {line['margin']}: "
        f"{line['decision']}"
    )
    if "real" in line:
        r = line["real"]
        print(
            f"real success over {cfg.eval_episodes} episodes: candidate {r['candidate']['success_rate']:.2f}, current "
            f"{r['current']['success_rate']:.2f}: the gate {'agreed' if r['agreed'] else 'disagreed'}"
        )
    print(f"log: {log}")
    return 0 if line["accepted"] else 1
