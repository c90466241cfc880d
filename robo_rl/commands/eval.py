"""`robo-rl eval`: a checkpoint's evaluation report; suites, `eval compare` and `eval sim_vs_real` below."""

from __future__ import annotations

import datetime
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from robo_rl.commands.common import UsageError, shows_progress
from robo_rl.commands.eval_plan import cmd_eval_plan, gain_option
from robo_rl.config import ConfigError, override_value
from robo_rl.configs.eval import EvalConfig
from robo_rl.configs.typed import config_from
from robo_rl.eval.compare_runs import compare_grouped, is_grouped
from robo_rl.eval.conditions import Suite, SuiteError, is_real_robot_config, load_suite, nominal_suite, suite_names
from robo_rl.eval.report import (
    ci_text,
    compare_markdown,
    compare_reports,
    header_lines,
    unused_report_dir,
    write_comparison,
    write_suite_report,
)
from robo_rl.eval.robustness import against_nominal, against_nominal_line
from robo_rl.eval.select import choose
from robo_rl.eval.sources import read_report, sim_vs_real_sources, source_labels


def cmd_eval(overrides: list[str], training_report: bool = False) -> int:
    """Evaluate a checkpoint; the report goes to <run>/eval/step_<N>/ (`training_report`: <run>/eval/, the
    report of the training run itself, written by `train` and by a learner started alone). With suite=<name> (or a
    person scoring, eval.score=human), and `eval compare` / `eval sim_vs_real`: below."""
    if overrides and overrides[0] in ("compare", "sim_vs_real"):  # recipes x seeds: robo_rl/eval/compare_runs.py
        return (compare_grouped if is_grouped(overrides) else cmd_eval_compare)(overrides[0], overrides[1:])
    if overrides and overrides[0] == "plan":
        return cmd_eval_plan(overrides[1:])
    if not training_report and wants_suite_runner(overrides):  # a run's own report stays the plain one
        return cmd_eval_suite(overrides)
    from omegaconf import OmegaConf

    from robo_rl.config import load_config, load_saved_config

    ckpt_arg = override_value(overrides, "checkpoint")
    if not ckpt_arg:
        raise UsageError("eval needs checkpoint=<file.pt or run folder>")
    rest = [o for o in overrides if not o.startswith("checkpoint=")]

    def config_of(run_dir: Path | None):  # the env the checkpoint was trained on, when its run folder says
        if run_dir is not None and (run_dir / "config.yaml").exists():
            return load_saved_config(run_dir / "config.yaml", rest)
        return load_config(rest)

    given = Path(ckpt_arg)
    if not given.exists():  # said before torch and the simulators are imported (seconds on a loaded machine)
        raise UsageError(f"checkpoint {given} does not exist: pass a .pt file or a run folder")
    guessed = given if given.is_dir() else given.parent.parent if given.parent.name == "checkpoints" else None
    cfg = config_of(guessed)  # a config error answers before torch and the simulators are imported
    from robo_rl.eval.episodes import evaluate_policy, load_policy, make_eval_env, write_report
    from robo_rl.runs import load_newest_readable

    payload, skipped = load_newest_readable(ckpt_arg)
    for problem in skipped:
        print(f"warning: {problem}: skipped, evaluating the checkpoint before it", file=sys.stderr)
    path = Path(payload["path"])
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    if run_dir != guessed:
        cfg = config_of(run_dir)
    if run_dir is not None:
        out_dir = run_dir / "eval" if training_report else run_dir / "eval" / path.stem
    else:
        out_dir = path.parent / "eval" / path.stem
    if not training_report and unused_report_dir(out_dir) != out_dir:
        print(f"an earlier report is in {out_dir}: kept; this one goes to {unused_report_dir(out_dir)}")
        out_dir = unused_report_dir(out_dir)
    import torch

    torch.set_num_threads(cfg.torch_threads)
    env = make_eval_env(cfg)  # behind its safety layer as trained; a learned reward it trained on watches
    try:
        policy = load_policy(cfg, env, payload)  # under actor.chunking as the actor runs it, as a suite's is
        settings = config_from(EvalConfig, OmegaConf.to_container(cfg.eval, resolve=True), "eval")
        result = evaluate_policy(
            env,
            policy.eval(),
            settings.episodes,
            settings.seed,
            progress=shows_progress(cfg),
            video_dir=out_dir / "videos" if settings.video else None,
            video_episodes=settings.video_episodes,
        )
    finally:
        env.close()
    env_steps = int(payload["counters"]["env_steps"])
    if given.is_dir() and run_dir is not None:  # a run given: its report is of the checkpoint eval.select picks
        result, path, env_steps = choose(run_dir, result, str(path), env_steps, settings.select, cfg, say=print)
    low, high = result["success_ci95"]
    print(
        f"success {result['successes']}/{result['episodes']} = {result['success_rate']:.2f} "
        f"(Wilson 95% CI [{low:.2f}, {high:.2f}]), mean length {result['mean_length']:.1f}"
    )
    metrics = run_dir / "metrics.jsonl" if run_dir is not None else None
    print(f"report: {write_report(out_dir, result, str(path), env_steps, metrics)}")
    return 0


NOT_OUTCOME_KEYS = ("logger.", "torch_threads", "outputs_dir", "cache_dir", "name=")  # a report stays reusable
TIMING_KEYS = ("episode_s", "step_ms", "started_at", "ended_at", "reset_s")  # per-episode wall times: differ per run
EVAL_KEYS = ("eval.suite", "eval.workers", "eval.score", "eval.video", "eval.episodes", "eval.seed")
REWARD_REFUSAL = (
    "eval.score=reward is refused: a policy scored by the reward model it was trained on is graded by "
    "the critic it learned to please (and may have learned to fool); use eval.score=env (the env's own "
    "success check) or eval.score=human (a person's labels)"
)


# --- the commands -------------------------------------------------------------------------------------------------
@dataclass
class EvalRequest:
    checkpoint: str
    suite: str | None
    workers: int | None  # None: the config's
    score: str | None
    video: bool | None
    episodes: int | None
    seed: int | None
    rest: list[str]  # the other overrides, applied to every condition


def parse_request(overrides: list[str]) -> EvalRequest:
    """The suite runner's own settings out of the command line, each checked; the rest are config overrides. Read
    here rather than from the run's config: a run folder saved before a setting existed does not have it."""
    import yaml

    from robo_rl.configs.settings import SETTINGS, problem

    given: dict[str, object] = {}
    rest = []
    for o in overrides:
        key, _, value = o.partition("=")
        key = "eval.suite" if key == "suite" else key
        if key in (*EVAL_KEYS, "checkpoint"):
            given[key] = value if key in ("checkpoint", "eval.suite") else yaml.safe_load(value)
        else:
            rest.append(o)
    if given.get("eval.score") == "reward":
        raise SuiteError(REWARD_REFUSAL)
    for key, value in given.items():
        if key in SETTINGS and (text := problem(key, value)):
            raise ConfigError(f"{key}={value} is not allowed: {text} ({SETTINGS[key].meaning})")
    if not given.get("checkpoint"):
        raise SuiteError("eval with a suite needs checkpoint=<file.pt or run folder>")
    suite = given.get("eval.suite")
    return EvalRequest(
        str(given["checkpoint"]),
        None if suite in (None, "", "null") else str(suite),
        given.get("eval.workers"),
        given.get("eval.score"),
        given.get("eval.video"),
        given.get("eval.episodes"),
        given.get("eval.seed"),
        rest,
    )  # type: ignore[arg-type]


def wants_suite_runner(overrides: list[str]) -> bool:
    """`robo-rl eval` goes to the suite runner with a suite, or with a person scoring (a one-condition suite)."""
    suite = override_value(overrides, "suite") or override_value(overrides, "eval.suite")
    score = override_value(overrides, "eval.score")
    if score == "reward":
        raise SuiteError(REWARD_REFUSAL)
    return suite not in (None, "", "null") or score == "human"


def evaluate_on_suite(overrides: list[str], reuse: bool = False, say=print) -> tuple[dict, Path]:
    """Evaluate a checkpoint (`checkpoint=`) on a suite; with `reuse`, an existing report of the same checkpoint,
    suite, seeds, scoring and overrides is returned instead. Returns (report, its folder)."""
    from robo_rl.config import load_config, load_saved_config

    req = parse_request(overrides)

    def configs(run_dir: Path | None) -> tuple:
        saved = run_dir is not None and (run_dir / "config.yaml").exists()

        def one(extra: list[str]):
            if saved:
                return load_saved_config(run_dir / "config.yaml", [*req.rest, *extra])
            return load_config([*req.rest, *_under_null_nodes(base, extra)] if extra else req.rest)

        base = one([])  # the user's own overrides: a problem there is theirs, not a condition's
        given_randomize = any(o.lstrip("+~").startswith("env.randomize") for o in req.rest)
        if req.suite is not None:
            suite = load_suite(req.suite)
        else:
            suite = nominal_suite(int(base.eval.episodes), int(base.eval.seed))
        suite = Suite(
            suite.name,
            req.episodes or suite.episodes,
            suite.seed if req.seed is None else req.seed,
            suite.conditions,
            suite.source,
        )
        cfgs = []
        for cond in suite.conditions:
            extra = list(cond.overrides) if given_randomize else _perturbation(base, list(cond.overrides))
            try:
                cfgs.append(one(extra))
            except ConfigError as e:
                raise SuiteError(f"suite {suite.name}, condition '{cond.name}': {e}") from None
        return base, suite, cfgs

    given = Path(req.checkpoint)
    guessed = given if given.is_dir() else given.parent.parent if given.parent.name == "checkpoints" else None
    base, suite, cfgs = configs(guessed)  # config errors answer before torch and the simulators are imported
    from robo_rl.runs import load_newest_readable

    payload, skipped = load_newest_readable(req.checkpoint)
    for problem in skipped:
        say(f"warning: {problem}: skipped, evaluating the checkpoint before it")
    path = Path(payload["path"])
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    if run_dir != guessed:
        base, suite, cfgs = configs(run_dir)
    score = req.score or base.eval.score  # a saved run's config holds every eval setting (complete_typed_blocks)
    workers = req.workers or int(base.eval.workers)
    real = any(is_real_robot_config(c) for c in cfgs)
    if real or score == "human":
        workers = 1
    folder = suite.name + ("_real" if real else "")
    out_dir = (run_dir if run_dir is not None else path.parent) / "eval" / folder
    outcome_overrides = [o for o in req.rest if not o.lstrip("+~").startswith(NOT_OUTCOME_KEYS)]
    key = {
        "signature": suite.signature(),
        "checkpoint": str(path.resolve()),
        "score": score,
        "overrides": outcome_overrides,
    }
    if reuse and (out_dir / "report.json").exists():
        old = json.loads((out_dir / "report.json").read_text())
        if {k: old.get(k) for k in key} == key and not old.get("stopped"):
            say(f"reusing {out_dir / 'report.json'} (same checkpoint, suite, seeds, scoring and overrides)")
            return old, out_dir
    import torch

    from robo_rl.eval.suite import run_suite, summarize

    torch.set_num_threads(base.torch_threads)
    film = req.video is not False  # clips unless eval.video=false: a suite's report shows what failing looks like
    run = run_suite(suite, cfgs, payload, workers, score, film, out_dir / "clips", bool(base.logger.progress))
    report = {
        **key,
        "suite": suite.name,
        "suite_file": suite.source,
        "episodes": suite.episodes,
        "seed": suite.seed,
        "env_steps": int(payload.get("counters", {}).get("env_steps", 0)),
        "real_robot": run.real_robot,
        "workers": workers,
        "stopped": run.stopped,
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "report_dir": str(out_dir.resolve()),
        "conditions": [
            summarize(c, e, clips) for c, e, clips in zip(suite.conditions, run.episodes, run.clips, strict=True)
        ],
    }
    report["against_nominal"] = against_nominal(report["conditions"])
    write_suite_report(out_dir, report)
    return report, out_dir


def _perturbation(cfg, overrides: list[str]) -> list[str]:
    """A condition's `env.randomize.<key>` overrides as one node that replaces the run's own: the randomisation a
    policy was trained with is not the condition's (nominal is nominal for every policy compared)."""
    import yaml
    from omegaconf import OmegaConf

    if OmegaConf.select(cfg, "env.randomize", default="absent") == "absent":
        return overrides  # an env without randomisation
    draws, rest = {}, []
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key == "env.randomize":
            return overrides  # the condition gives the whole node itself
        if key.startswith("env.randomize."):
            draws[key.removeprefix("env.randomize.")] = yaml.safe_load(value)
        else:
            rest.append(o)
    node = "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in draws.items()) + "}" if draws else "null"
    return [*rest, f"env.randomize={node}"]


def _under_null_nodes(cfg, overrides: list[str]) -> list[str]:
    """Hydra adds a key under a node that is null by default (`env.randomize: null`) only when told to (`++`); a
    saved config takes it as it is."""
    from omegaconf import OmegaConf

    out = []
    for o in overrides:
        key = o.split("=", 1)[0]
        parent = key.rpartition(".")[0]
        null_parent = parent and OmegaConf.select(cfg, parent, default="absent") is None
        out.append(f"++{o}" if null_parent and not key.startswith(("+", "~")) else o)
    return out


def cmd_eval_suite(overrides: list[str]) -> int:
    from robo_rl.eval.behaviour import farmed_warning
    from robo_rl.eval.throughput import rate_text
    from robo_rl.eval.unseen import unseen_note

    report, out_dir = evaluate_on_suite(overrides, say=lambda text: print(text, file=sys.stderr))
    print(f"suite {report['suite']}: " + header_lines(report)[1])
    width = max(len(c["name"]) for c in report["conditions"])
    for c in report["conditions"]:
        fails = ", ".join(f"{m.replace('_', ' ')} {n}" for m, n in c["failure_modes"].items() if n)
        print(
            f"  {c['name']:<{width}}  {c['successes']:>3}/{c['n']:<3} {c['success_rate']:.2f} {ci_text(c)}  "
            f"length {c['mean_length']:.1f}  {c['episode_s']:.3g} s/episode  {rate_text(c.get('throughput'))}  {fails}"
            + (f"  ({unseen_note(c)})" if unseen_note(c) else "")
            + (f"\n  {warning}" if (warning := farmed_warning(c.get("farmed_reward"), c["name"])) else "")
        )
    if against_nominal_line(report.get("against_nominal", [])):
        print(against_nominal_line(report["against_nominal"]))
    if report["stopped"]:
        print(f"stopped early: {report['stopped']}")
    print(f"report: {out_dir / 'report.md'} (and report.html, report.json)")
    return 0 if not report["stopped"] else 1


def cmd_eval_compare(kind: str, args: list[str]) -> int:
    """`compare <a> <b> ...`: side by side on one suite; `sim_vs_real <run>` or `<sim report> <real report>`."""
    positional = [a for a in args if "=" not in a]
    options = [a for a in args if "=" in a]
    out = override_value(options, "out")
    gain = gain_option(options)  # the gain the verdicts are about
    options = [o for o in options if not o.startswith(("out=", "gain="))]
    suite_arg = override_value(options, "suite") or override_value(options, "eval.suite")
    if kind == "sim_vs_real":
        positional, labels, out = sim_vs_real_sources(positional, suite_arg, out)
    elif len(positional) < 2:
        raise SuiteError(
            "usage: robo-rl eval compare <run or report> <run or report> ... [suite=<name>] [gain=0.1] [out=<folder>]"
        )
    else:
        labels = source_labels(positional)
    entries = []
    for label, arg in zip(labels, positional, strict=True):
        report = read_report(arg)
        if report is None:
            if suite_arg is None:
                raise SuiteError(
                    f"compare: {arg} is a run, not a report: give suite=<name> to evaluate it "
                    f"(the suites: {', '.join(suite_names())})"
                )
            print(f"{label}: evaluating {arg} on suite {suite_arg}", file=sys.stderr)
            report, _ = evaluate_on_suite(
                [f"checkpoint={arg}", *options], reuse=True, say=lambda text: print(text, file=sys.stderr)
            )
        entries.append((label, report))
    suites = {r["suite"] for _, r in entries}
    if len(suites) > 1:
        raise SuiteError(f"compare: the reports are of different suites ({', '.join(sorted(suites))})")
    comparison = compare_reports(entries, gain)
    title = "Sim vs real" if kind == "sim_vs_real" else "Comparison"
    stem = f"{kind if kind == 'sim_vs_real' else 'compare'}_{comparison['suite']}"
    first = Path(entries[0][1]["report_dir"])  # without out=: beside the first run's suite reports (<run>/eval/)
    out_dir = Path(out) if out else first.parent if first.parent.name == "eval" else first
    md = write_comparison(out_dir, stem, comparison, title)
    print(compare_markdown(comparison, title), end="")
    print(f"\nwritten: {md} and {md.with_suffix('.json')}")
    return 0
