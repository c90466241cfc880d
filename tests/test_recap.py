"""RECAP (π*0.6) and STEAM: return labels, the categorical value, n-step advantages, the positive indicator and its
sidecar, the advantage-conditioned flow policy with classifier-free guidance, and the `robo-rl recap` commands."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.advantage import (
    DROPPED,
    NEGATIVE,
    POSITIVE,
    PromptGuidance,
    advantage_prompt,
    dropped_labels,
    guided,
    labelled_prompts,
)
from policies.flow import ChunkGenerator, GenerativeBase
from robo_rl.cli import main
from robo_rl.config import ConfigError
from robo_rl.configs.recap import RecapConfig
from robo_rl.data.datasets import Episode
from robo_rl.data.datasets.io import save_store
from robo_rl.data.schema import step_fields
from robo_rl.offline.bc import save_atomic
from robo_rl.offline.recap import (
    label,
    n_step_advantages,
    positive_indicator,
    read_labels,
    returns_to_go,
    step_rewards,
)
from robo_rl.offline.recap_train import conditioned_generator, finetune
from robo_rl.offline.recap_value import fit_value, pessimistic_progress, predict_values

FAST = {"value_steps": 150, "value_hidden": (32, 32), "bins": 51, "updates": 40, "batch_size": 64, "n_step": 3}


def settings(**kw) -> RecapConfig:
    return RecapConfig(**{**FAST, **kw})


def episode(length: int, success: bool, episode_id: int, rng, intervention_at=(), cameras=None) -> Episode:
    """A hand-made episode of `length` steps on a 2-d state: a success reaches the goal at 1, a failure wanders."""
    fields = step_fields(2, 2, cameras or {})
    rec = {k: np.zeros((length + 1, *shape), dtype) for k, (shape, dtype) in fields.items()}
    rec["episode_id"][:] = episode_id
    rec["step"][:] = np.arange(length + 1)
    drift = 1.0 if success else -0.3
    rec["state"][:, 0] = np.linspace(0, drift, length + 1)
    rec["state"][:, 1] = rng.normal(0, 0.1, length + 1)
    actions = np.clip(rng.normal(drift, 0.3, (length, 2)), -1, 1).astype(np.float32)
    rec["action_executed"][1:] = rec["action_policy"][1:] = actions
    rec["success"][-1] = success
    rec["terminated" if success else "truncated"][-1] = True
    rec["intervention"][list(intervention_at)] = True
    for name in cameras or {}:  # the frame brightens with the state's progress
        level = (np.clip(rec["state"][:, 0], 0, 1) * 255).astype(np.uint8)
        rec[f"image/{name}"][:] = level[:, None, None, None]
    return Episode(rec, "online", "actor_0")


def store_of(tmp_path: Path, n: int = 12, seed: int = 0, cameras=None) -> Path:
    rng = np.random.default_rng(seed)
    eps = [episode(int(rng.integers(6, 12)), k % 2 == 0, k, rng, cameras=cameras) for k in range(n)]
    return save_store(eps, tmp_path / "store", partition="online", progress=False)


def base_checkpoint(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = ChunkGenerator(2, 2, chunk_size=2, steps=3, hidden=[32, 32])
    return save_atomic(model.checkpoint(execute_steps=2), tmp_path / "bc" / "policy.pt")


def files_digest(root: Path) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


# --- labels ---------------------------------------------------------------------------------------------------------
def test_returns_are_minus_one_a_step_and_a_failure_penalty_normalised_to_minus_one_to_zero():
    t_max, penalty = 10, 10.0
    scale = t_max + penalty
    success = returns_to_go(step_rewards(4, True, scale, penalty)) * scale
    assert success.tolist() == pytest.approx([-3.0, -2.0, -1.0, 0.0])  # the last step of a success pays 0
    failure = returns_to_go(step_rewards(10, False, scale, penalty))
    assert failure[0] * scale == pytest.approx(-9.0 - 10.0) and failure[-1] * scale == pytest.approx(-10.0)
    assert -1.0 <= failure.min() and failure.max() <= 0.0  # failed at the time limit: the bottom of the range


def test_n_step_advantages_on_a_hand_made_episode():
    rewards = np.array([-1.0, -1.0, -1.0, 0.0])
    values = np.array([-2.5, -2.0, -1.0, -0.5])
    adv = n_step_advantages(rewards, values, 2)
    # A_0 = r1 + r2 + V(s2) − V(s0); A_2 = r3 + r4 − V(s2) (the end: V = 0); A_3 = r4 − V(s3)
    assert adv.tolist() == pytest.approx([-2 - 1 + 2.5, -2 - 0.5 + 2.0, -1 + 0 + 1.0, 0 + 0.5])
    assert n_step_advantages(rewards, values, 1)[0] == pytest.approx(-1 - 2.0 + 2.5)


def test_the_indicator_marks_the_top_share_of_each_instruction_and_stores_its_threshold():
    rng = np.random.default_rng(0)
    adv = np.concatenate([rng.normal(0, 1, 6000), rng.normal(5, 1, 4000)])
    groups = np.array(["reach"] * 6000 + ["pick"] * 4000)
    positive, thresholds = positive_indicator(adv, groups, 0.3)
    assert positive[:6000].mean() == pytest.approx(0.3, abs=0.005)
    assert positive[6000:].mean() == pytest.approx(0.3, abs=0.005)  # per task: the easy one does not take all
    assert thresholds["pick"] > thresholds["reach"] + 3
    assert (adv[positive & (groups == "reach")] > thresholds["reach"]).all()


def test_the_categorical_value_learns_known_returns():
    rng = np.random.default_rng(0)
    states = rng.uniform(0, 1, (2000, 2)).astype(np.float32)
    returns = -0.9 * states[:, 0] - 0.05  # in [-0.95, -0.05]
    model, fit = fit_value(states, {}, returns, settings(value_steps=600, bins=101, value_lr=0.003))
    probe = np.array([[0.1, 0.5], [0.5, 0.5], [0.9, 0.5]], np.float32)
    v = predict_values(model, probe, {})
    assert v == pytest.approx(-0.9 * probe[:, 0] - 0.05, abs=0.05)
    assert fit["mean_abs_error"] < 0.05


# --- the advantage-conditioned policy ------------------------------------------------------------------------------
def test_guidance_at_one_is_the_conditional_and_at_zero_the_unconditional_exactly():
    torch.manual_seed(0)
    model = ChunkGenerator(2, 2, chunk_size=3, steps=4, hidden=[32], advantage_embedding=8).eval()
    obs = {"state": torch.randn(5, 2), "images": {}}
    noise = torch.randn(5, 3, 2)

    def euler(label: int) -> torch.Tensor:  # the plain sampler with the label fixed: no guidance anywhere
        features = model.features({**obs, "advantage": torch.full((5,), label)})
        x = noise
        for t in model.flow_times(4):
            x = x + model.predict(features, x, t) / 4
        return x.clamp(-1, 1)

    with torch.no_grad():
        model.guidance = 1.0
        assert torch.equal(model.sample(model.features(obs), noise), euler(POSITIVE))
        model.guidance = 0.0
        assert torch.equal(model.sample(model.features(obs), noise), euler(DROPPED))
        model.guidance = 2.0
        strong = model.sample(model.features(obs), noise)
    assert not torch.allclose(strong, euler(POSITIVE)) and not torch.allclose(strong, euler(DROPPED))
    assert torch.equal(guided(torch.ones(2), torch.zeros(2), 2.0), torch.full((2,), 2.0))


def test_a_base_gains_the_label_input_and_acts_exactly_as_before(tmp_path):
    from policies.checkpoint import read_bc_checkpoint

    payload = read_bc_checkpoint(base_checkpoint(tmp_path))
    conditioned = conditioned_generator(payload, 8, 1.5)
    base = GenerativeBase(ChunkGenerator(**payload["config"]))
    base.model.load_state_dict(payload["weights"])
    obs = {"state": np.array([0.3, -0.2], np.float32), "images": {}}
    noise = np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32)
    assert np.allclose(GenerativeBase(conditioned).predict_chunk(obs, noise), base.predict_chunk(obs, noise), atol=1e-6)
    assert "advantage_embedding" not in payload["config"]  # the old checkpoint stays as it was, and loads as before


def test_the_label_is_dropped_at_the_set_rate():
    labels = torch.full((200_000,), POSITIVE)
    given = dropped_labels(labels, 0.1, torch.Generator().manual_seed(0))
    assert (given == DROPPED).float().mean().item() == pytest.approx(0.1, abs=0.003)
    assert set(given.unique().tolist()) == {POSITIVE, DROPPED}


def test_a_vla_prompt_carries_the_label_and_guidance_runs_both_prompts():
    assert advantage_prompt("pick up the cube", POSITIVE) == "pick up the cube. Advantage: positive"
    assert advantage_prompt("pick up the cube.", NEGATIVE) == "pick up the cube. Advantage: negative"
    assert advantage_prompt("pick up the cube", DROPPED) == "pick up the cube"
    with pytest.raises(ValueError, match="advantage label"):
        advantage_prompt("x", 7)

    class StandIn:  # a VLA stand-in: its velocity says which prompt it read
        def features(self, obs):
            return torch.tensor([[1.0 if "positive" in text else 0.0] for text in obs["instruction"]])

        def predict(self, features, x, t):
            return features[:, :, None].expand_as(x) * 2.0 - 1.0  # +1 for the positive prompt, −1 for the plain

    obs = {"instruction": ["pick", "place"]}
    x = torch.zeros(2, 3, 1)
    for w, expected in ((1.0, 1.0), (0.0, -1.0), (0.5, 0.0), (2.0, 3.0)):
        g = PromptGuidance(StandIn(), w)
        assert torch.equal(g.predict(g.features(obs), x, 0.0), torch.full_like(x, expected))
    assert torch.equal(PromptGuidance(StandIn(), 1.0).sample(obs, x, 4), torch.ones_like(x))
    prompts = labelled_prompts(["pick"] * 20_000, [POSITIVE] * 10_000 + [NEGATIVE] * 10_000, 0.1)
    assert prompts[0] in ("pick. Advantage: positive", "pick") and prompts[-1] in ("pick. Advantage: negative", "pick")
    assert prompts.count("pick") / len(prompts) == pytest.approx(0.1, abs=0.01)  # the CFG dropout: the plain prompt


# --- label and fine-tune on a store -------------------------------------------------------------------------------
def test_labels_go_beside_the_data_without_touching_it_and_repeat_exactly(tmp_path):
    store = store_of(tmp_path)
    before = files_digest(store)
    first = label([store], settings(), progress=False)
    labels_dir = Path(first["sidecar"])
    assert labels_dir == store / "recap"
    cols, meta = read_labels(labels_dir)
    after = {k: v for k, v in files_digest(store).items() if "/recap/" not in k}
    assert after == before  # the data is never rewritten
    assert len(cols["step"]) == first["rows"] == meta["rows"] and meta["value_version"] == 1
    assert set(cols["source"]) == {"actor_0"} and cols["step"].min() == 0
    assert cols["positive"].mean() == pytest.approx(0.3, abs=0.03)
    assert cols["value"].min() >= -1.0 and cols["value"].max() <= 0.0
    again = label([store], settings(), out=tmp_path / "again", progress=False)
    cols2, _ = read_labels(Path(again["sidecar"]))
    assert np.array_equal(cols["advantage"], cols2["advantage"]) and np.array_equal(cols["positive"], cols2["positive"])
    assert label([store], settings(), progress=False)["value_version"] == 2  # labelled again: a new version


def test_human_corrections_are_positive(tmp_path):
    rng = np.random.default_rng(1)
    eps = [episode(8, k % 2 == 0, k, rng, intervention_at=(3, 4) if k == 1 else ()) for k in range(6)]
    store = save_store(eps, tmp_path / "store", partition="online", progress=False)
    cols, _ = read_labels(Path(label([store], settings(), progress=False)["sidecar"]))
    corrected = (cols["episode_id"] == 1) & np.isin(cols["step"], [2, 3])  # the observations those actions left
    assert cols["positive"][corrected].all()


def test_finetune_trains_the_conditioned_policy_at_the_dropout_rate_and_repeats_exactly(tmp_path):
    store = store_of(tmp_path)
    label([store], settings(), progress=False)
    base = base_checkpoint(tmp_path)
    m1, s1 = finetune(store / "recap", base, tmp_path / "a.pt", settings(cfg_dropout=0.25), progress=False)
    m2, _ = finetune(store / "recap", base, tmp_path / "b.pt", settings(cfg_dropout=0.25), progress=False)
    assert s1["dropout_rate"] == pytest.approx(0.25, abs=0.05) and s1["positive_rows"] == pytest.approx(0.3, abs=0.05)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True))
    from policies.checkpoint import read_bc_checkpoint
    from policies.flow import load_generative_base
    from robo_rl.envs import make_observation_space

    loaded = load_generative_base(read_bc_checkpoint(tmp_path / "a.pt"), make_observation_space(2, {}), 2)
    assert loaded.model.advantage is not None and loaded.model.guidance == 1.0 and loaded.fast is None


def test_steam_takes_the_worst_critic():
    class Critic:
        def __init__(self, delta):
            self.delta = np.asarray(delta, np.float32)

        def score(self, frames, task, previous=None):
            return type("S", (), {"delta": self.delta})()

    frames = {"front": np.zeros((3, 4, 4, 3), np.uint8)}
    worst = pessimistic_progress(
        [Critic([0.5, 0.1, 0.3]), Critic([0.2, 0.4, 0.3]), Critic([0.6, 0.2, -0.1])], frames, frames, "x"
    )
    assert worst.tolist() == pytest.approx([0.2, 0.1, -0.1])


def test_steam_labels_a_store_with_cameras(tmp_path):
    store = store_of(tmp_path, n=8, cameras={"front": (16, 16)})
    s = label([store], settings(value="steam", critics=2, critic_steps=3), progress=False)
    cols, meta = read_labels(Path(s["sidecar"]))
    assert meta["settings"]["value"] == "steam" and len(cols["advantage"]) == s["rows"]
    assert cols["positive"].mean() == pytest.approx(0.3, abs=0.05)


# --- refusals -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "option, words",
    [
        ("recap.positive_share=1.5", "recap.positive_share=1.5 is not allowed"),
        ("recap.cfg_dropout=-0.1", "recap.cfg_dropout=-0.1 is not allowed"),
        ("recap.value=magic", "recap.value=magic is not allowed"),
        ("recap.bins=1", "recap.bins=1 is not allowed"),
        ("recap.positive_shar=0.2", "did you mean 'recap.positive_share'"),
        ("colour=red", "unknown option colour"),
    ],
)
def test_bad_settings_are_refused_in_one_line(tmp_path, capsys, option, words):
    store = store_of(tmp_path, n=4)
    assert main(["recap", "label", str(store), option]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_recap_help_names_its_commands(capsys):
    assert main(["recap", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(verb in out for verb in ("collect", "label", "finetune", "tune <run>", "recap.<setting>"))
    assert main(["recap", "relabel"]) == 2 and "unknown recap command 'relabel'" in capsys.readouterr().err


def test_labelling_state_only_data_with_steam_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="needs camera frames"):
        label([store_of(tmp_path, n=4)], settings(value="steam"), progress=False)


@pytest.mark.slow  # lerobot's import alone takes half a minute on a loaded 2-core machine
def test_a_lerobot_dataset_gets_its_labels_beside_it_keyed_by_episode_and_frame(tmp_path, capsys):
    store = store_of(tmp_path, n=6)
    dataset = tmp_path / "lerobot"
    assert main(["data", "convert", str(store), str(dataset), "fps=10", "task=reach"]) == 0
    before = files_digest(dataset)
    assert main(["recap", "label", str(dataset), "recap.value_steps=50", "recap.bins=21", "recap.n_step=2"]) == 0
    assert "labels: " + str(dataset / "recap") in capsys.readouterr().out
    assert {k: v for k, v in files_digest(dataset).items() if "/recap/" not in k} == before
    cols, meta = read_labels(dataset / "recap")
    import pyarrow.parquet as pq

    frames = pq.read_table(sorted((dataset / "data").rglob("*.parquet"))[0]).to_pydict()
    assert sorted(zip(cols["episode_id"].tolist(), cols["step"].tolist(), strict=True)) == sorted(
        zip(frames["episode_index"], frames["frame_index"], strict=True)
    )  # one row per LeRobot frame: (episode_index, frame_index)
    assert meta["thresholds"].keys() == {"reach"}


@pytest.mark.slow
def test_one_recap_iteration_on_the_pick_task_from_a_small_flow_base(tmp_path, capsys):
    """bc → collect → label → finetune → collect with the guided policy, all through `robo-rl`, on pick_cube."""
    common = [f"outputs_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}", "logger.progress=false"]
    bc = ["bc", "env=pick_cube", "experiment=rlpd", "policy=flow", "demos.num_episodes=8", "bc.epochs=40"]
    bc += ["bc.patience=40", "bc.flow_updates=0", "bc.eval_episodes=0", "name=base", "policy.hidden=[64,64]"]
    assert main([*bc, *common]) == 0
    run = next(tmp_path.glob("*/*_base"))
    capsys.readouterr()
    assert main(["recap", "collect", str(run), "episodes=6", "logger.progress=false"]) == 0
    assert "bc/policy.pt (guidance 1.0): success" in capsys.readouterr().out
    small = ["recap.value_steps=100", "recap.updates=100", "recap.value_hidden=[64,64]"]
    assert main(["recap", "label", str(run), *small]) == 0
    out = capsys.readouterr().out
    assert "labelled" in out and "14 episodes" in out  # the 6 attempts and the base's 8 demonstrations
    assert main(["recap", "finetune", str(run), *small, "recap.guidance=1.5"]) == 0
    assert (run / "recap" / "policy.pt").exists()
    capsys.readouterr()
    assert main(["recap", "collect", str(run), "episodes=4", "logger.progress=false"]) == 0
    assert "recap/policy.pt (guidance 1.5): success" in capsys.readouterr().out
    from robo_rl.data.datasets.io import load_episodes

    sources = [e.source for e in load_episodes(run, progress=False)]
    assert sources.count("collect_1") == 6 and sources.count("collect_2") == 4


# --- the guidance scale, chosen on validation episodes ---------------------------------------------------------------
def test_the_most_successful_scale_wins_and_a_tie_goes_to_the_smaller_one():
    from robo_rl.offline.recap_tune import best_guidance

    assert best_guidance({1.0: {"successes": 20}, 2.0: {"successes": 31}, 3.0: {"successes": 29}}) == 2.0
    assert best_guidance({3.0: {"successes": 30}, 2.0: {"successes": 30}, 0.0: {"successes": 12}}) == 2.0


def test_recap_tune_writes_the_best_scale_into_the_checkpoint_and_refuses_an_unconditioned_one(tmp_path, capsys):
    from robo_rl.config import load_config, save_config
    from robo_rl.offline.recap_collect import load_acting_base

    run = tmp_path / "run"
    run.mkdir()
    save_config(load_config(["env=point_reach", "logger.progress=false"]), run / "config.yaml")
    torch.manual_seed(0)
    model = ChunkGenerator(4, 2, chunk_size=2, steps=2, hidden=[16], advantage_embedding=4, guidance=2.5)
    policy = save_atomic(model.checkpoint(execute_steps=2), run / "recap" / "policy.pt")
    assert main(["recap", "tune", str(run), "guidances=0,1", "episodes=3", "seed=300000"]) == 0
    out = capsys.readouterr().out
    tuned = json.loads((run / "recap" / "policy.guidance.json").read_text())
    assert set(tuned["results"]) == {"0.0", "1.0"} and all(r["episodes"] == 3 for r in tuned["results"].values())
    assert f"guidance {tuned['guidance']:g} from now on" in out and "guidance 0: success" in out
    from robo_rl.config import make_env

    env = make_env(load_config(["env=point_reach"]))
    try:
        assert load_acting_base(policy, env).model.guidance == tuned["guidance"] != 2.5  # acting now uses it
    finally:
        env.close()
    assert not any((run / "replay").glob("**/seg_*"))  # validation episodes are not stored as data
    # a policy that was never fine-tuned with labels has no scale to tune
    plain = save_atomic(ChunkGenerator(4, 2, chunk_size=2, steps=2, hidden=[16]).checkpoint(), tmp_path / "plain.pt")
    assert main(["recap", "tune", str(run), f"policy={plain}", "episodes=2"]) == 2
    assert "is not advantage-conditioned" in capsys.readouterr().err
    assert main(["recap", "tune", str(run), "guidances=1,1"]) == 2
    assert "distinct guidances" in capsys.readouterr().err


def test_recap_tune_keeps_the_scale_the_validation_episodes_favour(tmp_path, monkeypatch):
    import robo_rl.offline.recap_tune as tune

    seen = []

    def fake_collect(env, base, episodes, seed, run_dir, progress=True):  # successes by scale; the seeds recorded
        seen.append((base.model.guidance, seed, run_dir))
        k = {0.0: 1, 1.0: 6, 2.0: 9, 3.0: 9}[base.model.guidance]
        return {"successes": k, "episodes": episodes, "success_ci95": [0, 1], "mean_length": 10.0}

    monkeypatch.setattr(tune, "collect", fake_collect)
    from robo_rl.config import load_config, make_env

    model = ChunkGenerator(4, 2, chunk_size=2, steps=2, hidden=[16], advantage_embedding=4)
    policy = save_atomic(model.checkpoint(execute_steps=2), tmp_path / "policy.pt")
    env = make_env(load_config(["env=point_reach"]))
    try:
        best, _ = tune.tune_guidance(env, policy, [0.0, 1.0, 2.0, 3.0], 10, 300000, progress=False)
    finally:
        env.close()
    assert best == 2.0 and torch.load(policy, weights_only=True)["config"]["guidance"] == 2.0
    assert seen == [(w, 300000, None) for w in (0.0, 1.0, 2.0, 3.0)]  # the same episodes for each, none stored
