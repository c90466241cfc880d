"""Evaluation suites and their conditions: a suite (launch/conf/suite/<name>.yaml) names `episodes`, a first
`seed` and `conditions`, each a list of config overrides applied on top of the run's config. How a failed episode is
classified: robo_rl/eval/failures.py."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from robo_rl.config import CONF_DIR
from robo_rl.errors import UserError
from robo_rl.eval.failures import classify

SUITE_DIR = CONF_DIR / "suite"
HUMAN_LABELS = {"human_success": True, "human_failure": False}


class SuiteError(UserError, ValueError):
    """A suite, a condition or an evaluation request a user can fix; the text names it."""


class PromptError(SuiteError):
    """A person's answer is needed and nothing can give it (no device, stdin closed)."""


# --- suites -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    name: str
    overrides: tuple[str, ...] = ()
    setup: str | None = None  # what a person changes by hand for this condition on a real robot


@dataclass(frozen=True)
class Suite:
    name: str
    episodes: int
    seed: int
    conditions: tuple[Condition, ...]
    source: str = ""

    def seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.episodes))

    def signature(self) -> dict:
        """What two evaluations must share to be compared episode for episode."""
        return {
            "suite": self.name,
            "episodes": self.episodes,
            "seed": self.seed,
            "conditions": [[c.name, list(c.overrides)] for c in self.conditions],
        }


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def load_suite(spec: str) -> Suite:
    """A suite by name (launch/conf/suite/<name>.yaml) or by path; any problem is one line naming it."""
    import yaml

    path = Path(spec)
    if path.suffix not in (".yaml", ".yml"):
        path = SUITE_DIR / f"{spec}.yaml"
        if not path.is_file():
            close = difflib.get_close_matches(spec, suite_names(), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SuiteError(
                f"no suite '{spec}'{hint} (the suites: {', '.join(suite_names())}; or a path to a suite .yaml)"
            )
    elif not path.is_file():
        raise SuiteError(f"suite file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SuiteError(f"suite {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    where = f"suite {path}"
    if not isinstance(data, dict):
        raise SuiteError(f"{where}: must be a mapping with name, episodes, seed and conditions")
    unknown = set(data) - {"name", "episodes", "seed", "conditions"}
    if unknown:
        raise SuiteError(f"{where}: unknown keys {sorted(unknown)} (known: name, episodes, seed, conditions)")
    name, episodes, seed = data.get("name", path.stem), data.get("episodes"), data.get("seed", 0)
    if not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name):
        raise SuiteError(f"{where}: name must be letters, digits, '_', '.' or '-', got {name!r}")
    for key, value, low in (("episodes", episodes, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise SuiteError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
    conditions = data.get("conditions")
    if not isinstance(conditions, list) or not conditions:
        raise SuiteError(f"{where}: conditions must be a non-empty list of {{name, overrides}}")
    parsed = [_condition(c, i, where) for i, c in enumerate(conditions)]
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        raise SuiteError(f"{where}: two conditions share a name ({sorted({n for n in names if names.count(n) > 1})})")
    return Suite(name, episodes, seed, tuple(parsed), str(path))


def _condition(entry, index: int, where: str) -> Condition:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise SuiteError(f"{where}: condition {index + 1} must be a mapping with a name, got {entry!r}")
    name = entry["name"]
    if not re.fullmatch(r"[\w.-]+", name):
        raise SuiteError(f"{where}: condition name {name!r}: letters, digits, '_', '.' or '-' only (a file name)")
    unknown = set(entry) - {"name", "overrides", "setup"}
    if unknown:
        raise SuiteError(f"{where}: condition '{name}': unknown keys {sorted(unknown)} (known: overrides, setup)")
    overrides = entry.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise SuiteError(f"{where}: condition '{name}': overrides must be a list of 'key=value' strings")
    bad = [o for o in overrides if o.split("=", 1)[0].startswith("eval.")]
    if bad:
        raise SuiteError(f"{where}: condition '{name}': {bad[0]}: a condition changes the task, not the evaluation")
    return Condition(name, tuple(overrides), entry.get("setup"))


def nominal_suite(episodes: int, seed: int) -> Suite:
    """The one-condition suite of a plain evaluation that needs the suite runner (eval.score=human)."""
    return Suite("nominal", episodes, seed, (Condition("nominal"),), "eval.episodes/eval.seed")


# --- episodes -----------------------------------------------------------------------------------------------------
def failure_mode(record: dict, task: str | None = None) -> str | None:
    """Why an episode failed (None: it did not), by its task's failure modes (robo_rl/eval/failures.py)."""
    return classify(record, task)


def is_real_robot_config(cfg) -> bool:
    """A config whose env drives an arm (not its twin, not a dry run): people reset it, one process runs it."""
    from omegaconf import OmegaConf

    driver = OmegaConf.select(cfg, "env.driver", default=None)
    if not driver or "_target_" not in driver:
        return False
    return not (driver.get("twin") or OmegaConf.select(cfg, "env.dry_run", default=False) or cfg.hardware.dry_run)
