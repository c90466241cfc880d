"""Behaviour cloning (`robo-rl bc`): it learns from demonstrations, reports a loss on held-out episodes, runs its
chunks open-loop from a queue emptied at every episode start, and its checkpoint loads as a frozen base only on
the task it was made for."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from policies.bc import BCBase, BCCheckpointError, BCPolicy, load_bc_base
from robo_rl.cli import main
from robo_rl.config import load_config, make_env
from robo_rl.data.demos import load_or_make_demos
from robo_rl.envs import make_observation_space
from robo_rl.offline.bc import demos_dataset, evaluate_base, load_bc_data, train_bc


def _cfg(tmp_path, *overrides):
    return load_config(
        [
            "env=point_reach",
            "experiment=rlpd",
            f"cache_dir={tmp_path / 'cache'}",
            "logger.progress=false",
            "bc.eval_episodes=30",
            *overrides,
        ]
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One BC run on point_reach (20 scripted demonstrations, chunks of 2), shared by the tests below."""
    tmp = tmp_path_factory.mktemp("bc")
    cfg = _cfg(tmp, "bc.chunk_size=2")
    summary = train_bc(cfg, tmp / "run", progress=False)
    return cfg, tmp / "run", summary


def test_bc_learns_point_reach_far_above_an_untrained_policy(trained):
    cfg, run, summary = trained
    env = make_env(cfg)
    untrained = BCBase(BCPolicy(4, 2, chunk_size=2))
    before = evaluate_base(env, untrained, 30, int(cfg.eval.seed))["success_rate"]
    env.close()
    after = summary["eval"]["success_rate"]
    assert after >= 0.6 and after >= before + 0.4, (before, after)
    saved = json.loads((run / "bc" / "eval.json").read_text())
    assert saved["success_rate"] == after and len(saved["per_episode"]) == 30
    assert saved["base_inference_ms_p50"] > 0  # base inference time is measured and written


def test_validation_loss_is_reported_on_whole_held_out_episodes(trained, tmp_path):
    cfg, run, summary = trained
    assert summary["val_episodes"] == 4 and summary["val_transitions"] > 0
    assert np.isfinite(summary["val_loss"]) and summary["best_epoch"] < summary["epochs"]
    epochs = [json.loads(line) for line in (run / "bc" / "metrics.jsonl").read_text().splitlines()]
    assert len(epochs) == summary["epochs"] and all(np.isfinite(e["val_loss"]) for e in epochs)
    assert min(e["val_loss"] for e in epochs) == pytest.approx(summary["val_loss"])
    batch, _, _ = load_or_make_demos(cfg, progress=False)
    data = demos_dataset(batch, 0.2, 0)
    episode = data.buffer.data["episode_id"]
    assert not set(episode[data.val_rows]) & set(episode[data.train_rows])  # episodes, not random frames


def test_the_checkpoint_round_trips_and_holds_only_plain_data(trained):
    cfg, run, _ = trained
    payload = torch.load(run / "bc" / "policy.pt", weights_only=True)
    assert payload["config"]["state_names"] == ["x", "y", "goal_x", "goal_y"]
    env = make_env(cfg)
    base = load_bc_base(run, env.observation_space, 2, env.state_names)  # the run folder or the file
    again = load_bc_base(run / "bc" / "policy.pt", env.observation_space, 2)
    obs, _ = env.reset(seed=5)
    env.close()
    chunk = base.predict_chunk(obs)
    assert chunk.shape == (2, 2) and chunk.dtype == np.float32 and np.abs(chunk).max() <= 1
    np.testing.assert_array_equal(chunk, again.predict_chunk(obs))
    assert not any(p.requires_grad for p in base.policy.parameters())


def test_the_actors_numpy_forward_pass_computes_what_torch_computes(trained):
    """BCBase.predict_chunk runs numpy's forward pass on the CPU (policies/cpu_sampler.py): torch's chunks to
    float32 rounding on the trained policy, states beyond the normalisation clip included; in-place weights seen."""
    _, run, _ = trained
    base = load_bc_base(run, make_observation_space(4, {}), 2)
    assert base.fast is not None
    rng = np.random.default_rng(0)

    def worst_difference() -> float:
        worst = 0.0
        for _ in range(50):
            obs = {"state": rng.uniform(-3, 3, 4).astype(np.float32), "images": {}}
            chunk = base.predict_chunk(obs)
            assert chunk.dtype == np.float32 and chunk.shape == (2, 2)
            worst = max(worst, float(np.abs(chunk - base._torch_chunk(obs)).max()))
        return worst

    assert worst_difference() < 1e-5
    obs = {"state": np.ones(4, np.float32), "images": {}}
    before = base.predict_chunk(obs)
    with torch.no_grad():
        weight = base.policy.head[0].weight
        weight.add_(0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    assert np.abs(base.predict_chunk(obs) - before).max() > 1e-3 and worst_difference() < 1e-5
    with_camera = BCBase(BCPolicy(2, 2, cameras={"wrist": [32, 32]}, encoder={"features": 8, "channels": 4}))
    assert with_camera.fast is None  # cameras: torch's forward pass


def test_a_flow_or_diffusion_policy_trains_for_its_floor_of_gradient_steps_whatever_epochs_and_patience_say(tmp_path):
    from policies.flow import ChunkGenerator
    from robo_rl.offline.bc import train_policy

    cfg = _cfg(
        tmp_path, "bc.epochs=1", "bc.patience=1", "bc.flow_updates=10", "bc.diffusion_updates=25", "bc.batch_size=64"
    )
    data = load_bc_data(cfg, progress=False)
    per_epoch = -(-len(data.train_rows) // 64)
    assert per_epoch < 10  # so the floor, not one epoch, decides
    done = {}
    for kind in ("flow", "diffusion"):
        model = ChunkGenerator(4, 2, chunk_size=2, kind=kind, steps=2, hidden=[16])
        done[kind] = train_policy(model, data, cfg.bc, 0, torch.device("cpu"), progress=False)
    for kind, floor in (("flow", 10), ("diffusion", 25)):  # each kind its own floor, in whole epochs
        assert done[kind]["updates"] >= floor and done[kind]["epochs"] == -(-floor // per_epoch), (kind, done[kind])
    mlp = train_policy(BCPolicy(4, 2, 2, [16]), data, cfg.bc, 0, torch.device("cpu"), progress=False)
    assert mlp["updates"] == per_epoch and mlp["epochs"] == 1  # an MLP has no floor: one epoch, as configured


@pytest.mark.parametrize(
    ("state_dim", "cameras", "action_dim", "names", "expected"),
    [
        (5, {}, 2, None, "its state has 4 dimensions, the task's has 5"),
        (4, {}, 3, None, "its action dimension is 2, the task's is 3"),
        (4, {}, 2, ("x", "y", "goal_y", "goal_x"), "its state entry 2 is 'goal_x', the task's is 'goal_y'"),
    ],
)
def test_a_checkpoint_for_another_task_is_refused_naming_the_mismatch(
    trained, state_dim, cameras, action_dim, names, expected
):
    _, run, _ = trained
    with pytest.raises(BCCheckpointError) as e:
        load_bc_base(run, make_observation_space(state_dim, cameras), action_dim, names)
    assert expected in str(e.value) and "does not fit this task" in str(e.value) and "\n" not in str(e.value)


def test_a_missing_or_foreign_checkpoint_is_refused_in_one_line(tmp_path):
    space = make_observation_space(4, {})
    with pytest.raises(BCCheckpointError, match=r"base checkpoint .*nope\.pt does not exist"):
        load_bc_base(tmp_path / "nope.pt", space, 2)
    torch.save({"format": 1, "algo": {}}, tmp_path / "step.pt")  # a learner checkpoint, not a BC policy
    with pytest.raises(BCCheckpointError, match=r"is not a robo_rl BC policy"):
        load_bc_base(tmp_path / "step.pt", space, 2)


def test_chunks_run_open_loop_from_a_queue_emptied_at_each_episode_start(tmp_path):
    cfg = _cfg(tmp_path, "env.max_episode_steps=7")
    env = make_env(cfg)
    base = BCBase(BCPolicy(4, 2, chunk_size=5))
    seen = []
    predict = base.predict_chunk
    base.predict_chunk = lambda obs: (seen.append(obs["state"].copy()), predict(obs))[1]
    result = evaluate_base(env, base, 2, seed=3)
    starts = [env.reset(seed=s)[0]["state"] for s in (3, 4)]
    env.close()
    assert [r["length"] for r in result["per_episode"]] == [7, 7]  # too far apart to succeed early
    assert len(seen) == 4  # steps 0 and 5 of each episode: the rest of a chunk runs without inference
    np.testing.assert_array_equal(seen[0], starts[0])
    np.testing.assert_array_equal(seen[2], starts[1])  # a fresh chunk from the new episode's first observation


def test_robo_rl_bc_trains_writes_a_loadable_base_and_reports(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "bc",
            "env=point_reach",
            "experiment=rlpd",
            f"outputs_dir={out}",
            f"cache_dir={tmp_path / 'cache'}",
            "logger.progress=false",
            "bc.epochs=3",
            "bc.eval_episodes=3",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert "validation loss" in text and "success " in text and "Wilson 95% CI" in text
    (policy,) = out.glob("*/*/bc/policy.pt")
    env = make_env(_cfg(tmp_path))
    assert load_bc_base(policy, env.observation_space, 2).chunk_size == _cfg(tmp_path).bc.chunk_size


def test_bad_bc_input_is_one_line_before_any_run_folder(tmp_path, capsys):
    out = tmp_path / "out"
    args = [
        "env=point_reach",
        "experiment=rlpd",
        f"outputs_dir={out}",
        f"cache_dir={tmp_path / 'cache'}",
        "logger.progress=false",
    ]
    assert main(["bc", *args, "bc.chunk_size=0"]) == 2
    assert "bc.chunk_size=0 is not allowed" in capsys.readouterr().err
    assert main(["bc", *args, f"demos.path={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("robo-rl bc: error: demos.path:") and "does not exist" in err and "\n" not in err
    assert not out.exists()


def test_the_image_variant_trains_on_a_pixel_env_and_needs_its_camera(tmp_path):
    cfg = _cfg(
        tmp_path,
        "env.camera=true",
        "bc.images=true",
        "bc.epochs=1",
        "bc.eval_episodes=2",
        "bc.chunk_size=3",
        "demos.num_episodes=4",
        "policy.encoder.channels=8",
        "policy.encoder.features=8",
        "policy.encoder.kernels=[3,3]",
        "policy.encoder.strides=[1,1]",
    )
    summary = train_bc(cfg, tmp_path / "run", progress=False)
    assert summary["epochs"] == 1 and np.isfinite(summary["val_loss"])
    env = make_env(cfg)
    base = load_bc_base(tmp_path / "run", env.observation_space, 2)
    obs, _ = env.reset(seed=0)
    env.close()
    assert base.cameras == ["top"] and base.predict_chunk(obs).shape == (3, 2)
    with pytest.raises(BCCheckpointError, match=r"camera 'top' is not in the task \(it has no cameras\)"):
        load_bc_base(tmp_path / "run", make_observation_space(4, {}), 2)
    with pytest.raises(BCCheckpointError, match=r"camera 'top' is 8x8, the task's is 16x16"):
        load_bc_base(tmp_path / "run", make_observation_space(4, {"top": (16, 16)}), 2)


def test_bc_help_needs_no_torch():
    code = (
        "import sys, contextlib, io\nfrom robo_rl.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    main(['bc', '--help'])\n"
        "print(sorted(m for m in ('torch', 'mujoco') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "[]", out.stderr


def test_demonstrations_can_come_from_a_dataset_file(trained, tmp_path):
    cfg, _, _ = trained
    _, cache, _ = load_or_make_demos(cfg, progress=False)
    data = load_bc_data(_cfg(tmp_path, f"demos.path={cache}", "bc.val_fraction=0.25"))
    assert data.episodes == 20 and data.val_episodes == 5 and data.source == str(cache)


def test_one_config_trains_one_policy(tmp_path):
    cfg = _cfg(tmp_path, "bc.epochs=2", "bc.eval_episodes=0", "demos.num_episodes=4")
    weights = []
    for run in ("a", "b"):
        train_bc(cfg, tmp_path / run, progress=False)
        weights.append(torch.load(tmp_path / run / "bc" / "policy.pt", weights_only=True)["weights"])
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
