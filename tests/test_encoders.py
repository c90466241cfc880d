"""Pixel encoders: shapes, crops, random shift, ResNet-10 weights (local and hub), freezing and the feature cache."""

import copy

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from policies.augment import random_shift
from policies.encoders import EncoderConfig, encoder_for_space, image_to_float
from policies.gaussian import TanhGaussianPolicy
from policies.resnet import ResNet10, load_resnet10, save_resnet10
from robo_rl.algos.sac import SAC, SACConfig
from robo_rl.envs import make_observation_space

STATE = 5
CAMS = {"front": (40, 48), "wrist": (32, 32)}


def space(cams=CAMS):
    return make_observation_space(STATE, cams)


def obs(batch=4, cams=CAMS):
    images = {c: torch.randint(0, 256, (batch, h, w, 3), dtype=torch.uint8) for c, (h, w) in cams.items()}
    return {"state": torch.randn(batch, STATE), "images": images}


def sac_batch(batch=8, cams=CAMS):
    return {
        "obs": obs(batch, cams),
        "next_obs": obs(batch, cams),
        "action": torch.rand(batch, 2) * 2 - 1,
        "reward": torch.randn(batch),
        "discount": torch.full((batch,), 0.99),
    }


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)  # one torch thread per test: conftest's _one_torch_thread


# --- shapes and crops --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["cnn", "resnet10"])
@pytest.mark.parametrize("cams", [{"front": (40, 48)}, CAMS], ids=["1cam", "2cams"])
def test_features_are_state_plus_one_vector_per_camera(kind, cams):
    enc = encoder_for_space(space(cams), config={"kind": kind, "features": 16})
    out = enc(obs(3, cams))
    assert out.shape == (3, STATE + 16 * len(cams)) == (3, enc.out_dim)
    assert torch.isfinite(out).all() and out[:, STATE:].abs().max() <= 1  # LayerNorm + tanh
    if kind == "resnet10":
        assert not hasattr(enc.cameras["front"], "conv")  # one backbone for all cameras, a head per camera


def test_crop_selects_the_region_of_interest():
    top, left, h, w = 5, 9, 31, 33
    enc = encoder_for_space(space(), config={"crops": {"front": [top, left, h, w]}})
    o = obs(2)
    o["images"]["front"].zero_()
    o["images"]["front"][:, top : top + h, left : left + w] = 200  # content only inside the ROI
    prepared = enc.prepare(o["images"])
    assert prepared["front"].shape == (2, h, w, 3) and (prepared["front"] == 200).all()
    assert prepared["wrist"] is o["images"]["wrist"]  # no crop configured: the same tensor
    assert enc.prepare(prepared) is prepared
    with pytest.raises(ValueError, match=r"camera 'front' image is \(31, 33\), the crop expects the env's \(40, 48"):
        enc.prepare(dict(prepared))  # cropping twice is refused
    # the encoder sees nothing outside the ROI: changing it leaves the features as they were
    before = enc(o)
    o["images"]["front"][:, :top] = 255
    o["images"]["front"][:, :, left + w :] = 77
    assert torch.equal(enc(o), before)
    o["images"]["front"][:, top + 3, left + 4] = 0
    assert not torch.equal(enc(o), before)


def test_resize_and_bad_crops_are_refused_with_the_camera_named():
    enc = encoder_for_space(space(), config={"crops": {"front": [0, 0, 40, 40]}, "resize": [36, 36]})
    assert {k: tuple(v.shape) for k, v in enc.prepare(obs(2)["images"]).items()} == {
        "front": (2, 36, 36, 3),
        "wrist": (2, 36, 36, 3),
    }
    flat = {
        "front": torch.full((1, 40, 48, 3), 93, dtype=torch.uint8),
        "wrist": torch.zeros(1, 32, 32, 3, dtype=torch.uint8),
    }
    resized = enc.prepare(flat)
    assert resized["front"].dtype == torch.uint8 and (resized["front"] == 93).all()
    with pytest.raises(ValueError, match="crops.front .* outside the 40×48 image"):
        encoder_for_space(space(), config={"crops": {"front": [10, 0, 40, 40]}})
    with pytest.raises(ValueError, match=r"cameras \['top'\]"):
        encoder_for_space(space(), config={"crops": {"top": [0, 0, 8, 8]}})
    with pytest.raises(ValueError, match="shrink 8×8 images to nothing: set policy.encoder.resize"):
        encoder_for_space(space({"top": (8, 8)}))
    with pytest.raises(ValueError, match="unknown policy.encoder.kind 'vit'"):
        EncoderConfig.parse({"kind": "vit"})


def test_float_conversion_matches_torch():
    x = torch.randint(0, 256, (3, 7, 9, 3), dtype=torch.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    expected = (x.permute(0, 3, 1, 2).float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(
        1, 3, 1, 1
    )
    torch.testing.assert_close(image_to_float(x, mean, std), expected)
    torch.testing.assert_close(image_to_float(x[:, 1:5, 2:8]), x[:, 1:5, 2:8].permute(0, 3, 1, 2).float() / 255)


# --- random shift ------------------------------------------------------------------------------
def _naive_shift(images, pad, dy, dx):
    padded = F.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate").permute(0, 2, 3, 1)
    h, w = images.shape[1:3]
    return torch.stack([padded[i, y : y + h, x : x + w] for i, (y, x) in enumerate(zip(dy, dx, strict=True))]).to(
        torch.uint8
    )


def test_random_shift_moves_each_sample_by_at_most_pad_with_replicated_edges():
    b, h, w, pad = 64, 24, 20, 4
    images = torch.zeros(b, h, w, 3, dtype=torch.uint8)
    images[:, 12, 10] = 255  # one bright pixel, away from the edges
    images[:, :, 0, 1] = torch.arange(h, dtype=torch.uint8)  # an edge column, to see the replication
    torch.manual_seed(3)
    out = random_shift(images, pad)
    assert out.shape == images.shape and out.dtype == torch.uint8
    found = (out[..., 0] == 255).nonzero()
    assert len(found) == b and torch.equal(found[:, 0], torch.arange(b))  # the pixel stays inside every image
    dy, dx = found[:, 1] - 12, found[:, 2] - 10
    assert dy.abs().max() <= pad and dx.abs().max() <= pad
    assert len({(int(y), int(x)) for y, x in zip(dy, dx, strict=True)}) > 20, "samples get independent shifts"
    # equal to replicate-pad + crop, sample by sample
    torch.testing.assert_close(out, _naive_shift(images, pad, pad - dy, pad - dx), rtol=0, atol=0)
    assert random_shift(images, 0) is images
    torch.manual_seed(3)
    assert torch.equal(random_shift(images, pad), out), "drawn from torch's RNG: a restored RNG state repeats it"


# --- ResNet-10 weights -------------------------------------------------------------------------
def test_pretrained_resnet10_loads_from_a_local_folder_and_a_torch_file(tmp_path):
    source = ResNet10()
    for p in source.parameters():
        torch.nn.init.normal_(p, 0, 0.05)
    folder = save_resnet10(source, tmp_path / "weights")
    assert (folder / "model.safetensors").exists() and (folder / "config.json").exists()
    cfg = {"kind": "resnet10", "pretrained": str(folder), "features": 8}
    a, b = encoder_for_space(space(), config=cfg), encoder_for_space(space(), config=cfg)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(a.backbone(x), source(x), rtol=0, atol=0)
    b.load_state_dict(a.state_dict())
    o = obs(2)
    assert torch.equal(a(o), b(o))
    # a torch state dict saved from a wrapper module ("model." prefix) loads too
    torch.save({f"model.{k}": v for k, v in source.state_dict().items()}, tmp_path / "wrapped.pt")
    torch.testing.assert_close(load_resnet10(tmp_path / "wrapped.pt")(x), source(x), rtol=0, atol=0)


def test_missing_or_incompatible_weights_name_the_source(tmp_path):
    with pytest.raises(FileNotFoundError, match="'/no/such/resnet10': no such file"):
        load_resnet10("/no/such/resnet10")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no model.safetensors or torch state dict in"):
        load_resnet10(tmp_path / "empty")
    torch.save({"embedder.0.weight": torch.zeros(64, 3, 5, 5)}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"bad.pt' do not fit ResNet-10 \(missing: .*wrong shape: embedder.0.weight"):
        load_resnet10(tmp_path / "bad.pt")


def test_a_hub_id_is_fetched_with_snapshot_download(tmp_path, monkeypatch):
    import huggingface_hub

    source = ResNet10()
    save_resnet10(source, tmp_path / "snapshot")
    calls = []

    def fake_download(repo_id, **kwargs):
        calls.append(repo_id)
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.chdir(tmp_path)  # "someone/resnet10" is not a local path here
    model = load_resnet10("someone/resnet10")
    assert calls == ["someone/resnet10"]
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())
    load_resnet10(tmp_path / "snapshot")  # a local path never asks the hub
    assert calls == ["someone/resnet10"]

    def offline(repo_id, **kwargs):
        raise OSError("no internet")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(FileNotFoundError, match="'someone/resnet10': no such local .* hub id failed .*no internet"):
        load_resnet10("someone/resnet10")


# --- SAC with pixels ---------------------------------------------------------------------------
def _sac(encoder, **algo):
    policy = TanhGaussianPolicy(space(), 2, hidden=[32, 32], encoder=encoder)
    return SAC(policy, space(), SACConfig(critic_hidden=(32, 32), **algo))


def test_frozen_backbone_is_shared_unchanged_and_computed_once_per_input(tmp_path):
    save_resnet10(ResNet10(), tmp_path / "w")
    sac = _sac({"kind": "resnet10", "pretrained": str(tmp_path / "w"), "freeze": True, "features": 8})
    backbone = sac.policy.encoder.backbone
    assert sac.critic.encoder.backbone is backbone and sac.target_critic.encoder.backbone is backbone
    assert not any(p.requires_grad for p in backbone.buffers()) and not list(backbone.parameters())
    before = copy.deepcopy(backbone.state_dict())
    heads_before = copy.deepcopy(sac.critic.encoder.cameras.state_dict())
    calls = []
    backbone.register_forward_hook(lambda *_: calls.append(1))
    sac.policy.train()
    assert not backbone.training
    sac.update([sac_batch(), sac_batch()])
    # 2 critic batches × (obs, next_obs) × 2 cameras; critic, target critic and actor reuse them
    assert len(calls) == 2 * 2 * 2
    assert all(torch.equal(v, before[k]) for k, v in backbone.state_dict().items())
    assert all(t.grad is None for t in backbone.buffers())
    assert sac.critic.encoder.backbone is backbone and not list(backbone.parameters())  # still frozen
    assert any(not torch.equal(v, heads_before[k]) for k, v in sac.critic.encoder.cameras.state_dict().items())


@pytest.mark.parametrize("kind", ["cnn", "resnet10"])
def test_sac_update_with_images_trains_every_trainable_weight(kind):
    sac = _sac({"kind": kind, "features": 8})
    assert sac.critic.encoder is not sac.policy.encoder
    assert sac.critic.encoder.config == sac.policy.encoder_config  # same kind, separate weights
    before = {n: p.detach().clone() for n, p in [*sac.policy.named_parameters(), *sac.critic.named_parameters()]}
    sac.update([sac_batch()])
    after = dict([*sac.policy.named_parameters(), *sac.critic.named_parameters()])
    unchanged = [n for n, p in after.items() if torch.equal(p, before[n])]
    assert not unchanged
    assert not any(p.requires_grad for p in sac.target_critic.parameters())


def test_augmentation_is_applied_once_per_batch_and_not_to_the_callers_batch():
    sac = _sac({"features": 8}, augment_pad=4)
    batch = sac_batch(16)
    originals = {c: im.clone() for c, im in batch["obs"]["images"].items()}
    prepared = sac.prepare_batch(batch)
    assert all(torch.equal(batch["obs"]["images"][c], im) for c, im in originals.items())
    assert not torch.equal(prepared["obs"]["images"]["front"], originals["front"])
    assert prepared["action"] is batch["action"]
    unshifted = _sac({"features": 8}, image_augmentation=None).prepare_batch(batch)
    assert unshifted["obs"]["images"]["front"] is batch["obs"]["images"]["front"]
    with pytest.raises(ValueError, match="image_augmentation must be random_shift or null, got 'flip'"):
        _sac({"features": 8}, image_augmentation="flip")


def test_state_only_configs_are_unaffected():
    state_space = make_observation_space(STATE, {})
    runs = []
    for augmentation in ("random_shift", None):
        torch.manual_seed(1)
        policy = TanhGaussianPolicy(state_space, 2, hidden=[32, 32], image_features=64)  # an older saved config
        sac = SAC(policy, state_space, SACConfig(critic_hidden=(32, 32), image_augmentation=augmentation))
        batch = sac_batch(8, cams={})
        sac.update([batch])
        runs.append((torch.get_rng_state(), [p.detach().clone() for p in policy.parameters()]))
    assert torch.equal(runs[0][0], runs[1][0]), "no random numbers drawn for a batch without images"
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))
    with pytest.raises(ValueError, match="disagree"):
        TanhGaussianPolicy(state_space, 2, image_features=32, encoder={"features": 64})


def test_the_resnet10_policy_config_builds_from_a_local_copy(tmp_path):
    from robo_rl.config import load_config, make_policy
    from sim.point_reach import PointReachEnv

    save_resnet10(ResNet10(), tmp_path / "w")
    cfg = load_config(
        [
            "env=point_reach",
            "experiment=rlpd",
            "env.camera=true",
            "policy=resnet10",
            f"policy.encoder.pretrained={tmp_path / 'w'}",
            "policy.encoder.resize=[32,32]",
        ]
    )
    env = PointReachEnv(camera=True)
    policy = make_policy(cfg, env)
    assert policy.encoder_config.kind == "resnet10" and policy.encoder_config.freeze
    o, _ = env.reset(seed=0)
    action = policy.act(
        {
            "state": torch.from_numpy(o["state"])[None],
            "images": {"top": torch.from_numpy(np.asarray(o["images"]["top"]))[None]},
        }
    )
    assert action.shape == (1, 2) and action.abs().max() <= 1


def test_a_shared_encoder_is_trained_by_the_critic_only_and_the_policy_sees_it():
    sac = _sac({"channels": 8}, share_encoder=True)
    assert sac.critic.encoder is sac.policy.encoder and sac.target_critic.encoder is not sac.policy.encoder
    batch = sac.prepare_batch(sac_batch())
    before = [p.clone() for p in sac.policy.encoder.parameters()]
    sac.update_actor(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, sac.policy.encoder.parameters(), strict=True))
    sac.update_critic(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, sac.policy.encoder.parameters(), strict=True))


def test_the_cnn_layers_come_from_the_config():
    big = space({"front": (64, 64)})  # LeRobot's default conv stack: 7-5-3-3, all stride 2
    encoder = encoder_for_space(big, config={"channels": 8, "kernels": [7, 5, 3, 3], "strides": [2, 2, 2, 2]})
    convs = [m for m in encoder.cameras["front"].conv if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
        (8, 7, 2),
        (8, 5, 2),
        (8, 3, 2),
        (8, 3, 2),
    ]
    with pytest.raises(ValueError, match="same length"):
        EncoderConfig.parse({"kernels": [3, 3], "strides": [2]})


def test_encoder_cameras_picks_what_actor_and_critics_read_and_refuses_a_camera_the_env_lacks():
    """`policy.encoder.cameras`: [] reads the state alone though the env has cameras (DSRL's noise actor over a VLA
    that reads them itself), a list reads those cameras only; an unread camera's pixels change nothing."""
    state_only = encoder_for_space(space(), config={"features": 8, "cameras": []})
    wrist_only = encoder_for_space(space(), config={"features": 8, "cameras": ["wrist"]})
    assert (state_only.out_dim, wrist_only.out_dim) == (STATE, STATE + 8)
    assert list(wrist_only.cameras) == ["wrist"] and not list(state_only.parameters())
    o = obs(3)
    other = {
        **o,
        "images": {**o["images"], "front": torch.randint(0, 256, o["images"]["front"].shape, dtype=torch.uint8)},
    }
    assert torch.equal(state_only(o), o["state"])
    assert torch.equal(wrist_only(o), wrist_only(other))
    other["images"]["wrist"] = 255 - o["images"]["wrist"]
    assert not torch.equal(wrist_only(o), wrist_only(other))
    with pytest.raises(ValueError, match=r"policy.encoder.cameras names \['side'\], which the env does not have; "
                       r"it has \['front', 'wrist'\]"):  # fmt: skip
        encoder_for_space(space(), config={"cameras": ["wrist", "side"]})
    sac = _sac({"features": 8, "cameras": []})  # a batch with images trains a state-only SAC, no RNG for shifts
    batch = sac_batch(8)
    rng = torch.get_rng_state()
    prepared = sac.prepare_batch(batch)
    assert torch.equal(rng, torch.get_rng_state()) and not prepared["obs"]["images"]
    sac.update([batch])
