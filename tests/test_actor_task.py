"""Each actor its own task (issue 49): `actor.task=<name>` resets a multi-task env on that task every episode, and
`robo-rl train train.actor_tasks=split` gives actor i the env's task i mod the number of tasks; the learner's episode
lines name each episode's instruction and its task vocabulary stays the env's whole one. A task the env cannot draw,
and a split over fewer than two tasks, are refused in one line before anything starts."""

import importlib.util

import pytest

from robo_rl.config import make_env
from robo_rl.envs.spec import spec_of, write_spec
from robo_rl.runs import read_metrics
from tests.test_cli import in_this_process, isolated
from tests.test_pipeline import SMALL_NETS, run_pair, toy_config

TWO_TASKS = {  # (the env's overrides, the task the actor is given, that task's instruction, the other's)
    "pick_color": (["env=pick_color", "env.max_episode_steps=15"], "blue", "pick up the blue cube", "red"),
    "metaworld": (
        ["env=metaworld", "env.task='reach-v3,push-v3'", "env.max_episode_steps=15"],
        "push-v3",
        "Push the puck to a goal",
        "Reach a goal position",
    ),
}
SHORT_RUN = ["demos.num_episodes=0", "train.learning_starts=50", "algo.batch_size=16", *SMALL_NETS]


def needs(env: str) -> None:
    if env == "metaworld" and importlib.util.find_spec("metaworld") is None:
        pytest.skip("Meta-World is an optional extra: uv sync --extra metaworld")


@pytest.mark.parametrize("env", sorted(TWO_TASKS))
def test_an_actor_given_one_task_of_two_runs_only_that_task_every_episode(tmp_path, env):
    needs(env)
    overrides, task, instruction, _ = TWO_TASKS[env]
    cfg = toy_config(
        tmp_path,
        *overrides,
        f"actor.task='{task}'",
        *SHORT_RUN,
        "train.total_env_steps=150",
        "actor.throttle_to_learner=false",
        "train.utd=0.25",  # the updates are not what this checks
    )
    env = make_env(cfg)  # Meta-World's spaces come from an env (no spec_from_config): the learner reads this file
    write_spec(spec_of(env), tmp_path / "run")
    env.close()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done"
    episodes = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["kind"] == "episode"]
    # drawn per episode from the seed, 8 episodes of two tasks would all be this one task in 1 run of 128
    assert len(episodes) >= 8
    assert {e["instruction"] for e in episodes} == {instruction}
    assert learner.replay.tasks.names == [instruction]  # the records' task table holds that task alone


def test_train_split_gives_each_actor_its_own_task_and_keeps_the_whole_vocabulary(tmp_path, monkeypatch):
    from robo_rl.config import load_saved_config

    overrides, _, _, _ = TWO_TASKS["pick_color"]
    code = in_this_process(
        monkeypatch,
        "train",
        *isolated(tmp_path),
        *overrides,
        *SHORT_RUN,
        "train.actors=2",
        "train.actor_tasks=split",
        "train.total_env_steps=400",  # both actors start at once; the steps leave the later one time for episodes
        "policy.encoder.task_conditioning=onehot",
        "eval.episodes=2",
    )
    assert code == 0
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    episodes = [m for m in read_metrics(run_dir / "metrics.jsonl") if m["kind"] == "episode"]
    by_actor = {a: {e["instruction"] for e in episodes if e["actor"] == a} for a in ("actor-0", "actor-1")}
    assert by_actor == {"actor-0": {"pick up the red cube"}, "actor-1": {"pick up the blue cube"}}
    assert all(sum(e["actor"] == a for e in episodes) >= 2 for a in by_actor)
    # each actor runs one task; the one-hot still spans the env's two
    instructions = load_saved_config(run_dir / "config.yaml").policy.encoder.instructions
    assert list(instructions) == ["pick up the red cube", "pick up the blue cube"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [*TWO_TASKS["pick_color"][0], "actor.task=bleu"],
            "actor.task='bleu' is not one of this env's tasks; did you mean 'blue'? (its tasks: red, blue)",
        ),
        (
            [*TWO_TASKS["metaworld"][0], "actor.task=psuh-v3"],
            "actor.task='psuh-v3' is not one of this env's tasks; did you mean 'push-v3'? (its tasks: reach-v3, "
            "push-v3)",
        ),
        (["env=point_reach", "actor.task=reach"], "actor.task=reach: this env has no tasks to choose from"),
        (
            ["env=pick_color", "env.target=red", "train.actors=2", "train.actor_tasks=split"],
            "train.actor_tasks=split gives each actor its own task, but this env has one task (red)",
        ),
        (
            ["env=point_reach", "train.actors=2", "train.actor_tasks=split"],
            "train.actor_tasks=split gives each actor its own task, but this env has no tasks",
        ),
        (
            [*TWO_TASKS["pick_color"][0], "actor.task=red", "train.actor_tasks=split"],
            "actor.task=red and train.actor_tasks=split each choose the actors' tasks: set one",
        ),
    ],
)
def test_a_task_the_env_cannot_give_is_refused_in_one_line_before_anything_starts(
    tmp_path, monkeypatch, capsys, args, message
):
    needs("metaworld" if "env=metaworld" in args else "")
    code = in_this_process(monkeypatch, "train", *isolated(tmp_path), *args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "outputs").exists()  # no run folder, no process


def test_an_actor_started_on_its_own_refuses_a_task_its_env_cannot_give(tmp_path):
    from robo_rl.actor import Actor
    from robo_rl.envs.actor_task import ActorTaskError

    cfg = toy_config(tmp_path, *TWO_TASKS["pick_color"][0], "actor.task=green")
    with pytest.raises(ActorTaskError, match=r"actor.task='green' is not one of this env's tasks \(its tasks: red"):
        Actor(cfg, progress=False)
