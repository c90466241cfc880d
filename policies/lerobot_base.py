"""Any LeRobot pretrained policy as a frozen base (`policies.base.BasePolicy`), through lerobot's own loading.

A `pretrained_model` folder (what `lerobot-train` saves) or a hub id is loaded the way `lerobot-eval` does it:
the config, then the policy class registered for its type (`from_pretrained`), then its saved pre- and
post-processor pipelines. Our observation is mapped onto the policy's input features:

    observation.state, observation.environment_state   our state vector (the whole of it)
    observation.images.<camera>, observation.image      our uint8 HWC image of that camera, as float CHW in [0, 1]
    task                                               the observation's instruction, else the configured task
                                                       text, for policies that tokenise one (VLAs)

Its actions, un-normalised by its post-processor, are in the action space of the dataset it was trained on;
for a dataset robo_rl exported that is our normalised action space, so they are clipped to [-1, 1].

Noise steering (DSRL): a policy whose sampler starts from Gaussian noise takes that noise from the caller,
`predict_chunk(obs, noise=z)` with z of shape `noise_shape`, through lerobot's `predict_action_chunk(batch, noise=)`:

    smolvla, pi0, pi05    flow matching: z is x_1 of the Euler integration, (chunk_size, max_action_dim) (the padded
                          action width; the columns past the task's action_dim are cut from the output, yet they
                          enter the action expert, so they steer too)
    diffusion             z is the initial sample, (horizon, action_dim); deterministic in z with a DDIM scheduler
                          only: DDPM adds fresh noise at every denoising step

Other policies (ACT, VQ-BeT, ...) and closed-loop runs (select_action draws its own noise) have `noise_shape` None.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch

from policies.language import instruction_rows, task_texts
from policies.vla_checks import BaseMismatchError, check_instruction_fits

ACTION = "action"
STATE_INPUTS = ("observation.state", "observation.environment_state")
IMAGE_PREFIX, SINGLE_IMAGE = "observation.images.", "observation.image"
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")
TOKENIZER_STEP = "tokenizer_processor"  # lerobot's registry name of the step that tokenises the task text
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
FLOW_NOISE_TYPES = ("smolvla", "pi0", "pi05")  # sample_actions(noise=): [batch, chunk_size, max_action_dim], float32
DIFFUSION_TYPE = "diffusion"  # conditional_sample(noise=): [batch, horizon, action_dim], the parameters' dtype


class LeRobotBase:
    """A LeRobot policy predicting chunks of actions for our observations; frozen (eval mode, no gradients)."""

    def __init__(
        self,
        policy,
        preprocessor,
        postprocessor,
        inputs: dict[str, str],
        action_dim: int,
        task: str | None = None,
        name: str = "",
    ) -> None:
        self.policy, self.preprocessor, self.postprocessor = policy, preprocessor, postprocessor
        self.inputs = inputs  # policy input feature -> "state" or "images/<camera>"
        self.action_dim, self.task, self.name = action_dim, task, name
        self.fitting_texts = {task}  # instructions checked against its tokenizer's length (`load` checks `task`)
        self.action_range = None  # set by `load` from its dataset statistics, where it kept them
        self.state_stats = None  # (mean, std) of its training state, the same way
        cfg = policy.config
        # a policy that stacks past observations (n_obs_steps > 1) or ensembles chunks over time must see every
        # step: it runs closed-loop through its own select_action and queues; the others run open-loop chunks
        history = cfg.observation_delta_indices  # the past frames a policy sees; None: the current one, no time axis
        self.closed_loop = len(history or [0]) > 1 or getattr(cfg, "temporal_ensemble_coeff", None) is not None
        self.chunk_size = 1 if self.closed_loop else int(getattr(cfg, "n_action_steps", 1) or 1)
        self.time_axis = history is not None  # its inputs are [batch, time, ...] outside select_action (Diffusion)
        # (chunk length, width) of the initial noise its sampler takes from predict_action_chunk; None: it takes none
        self.noise_shape = None if self.closed_loop else noise_shape(cfg)

    @classmethod
    def load(
        cls,
        path_or_hub_id: str | Path,
        observation_space,
        action_dim: int,
        device: str = "cpu",
        task: str | None = None,
        camera_map: dict[str, str] | None = None,
    ) -> LeRobotBase:
        """Load a LeRobot policy and its processors; refuse, in one line, one whose features do not fit the task.

        `observation_space`: our observation space (`{"state": Box, "images": Dict}`); `camera_map`: the policy's
        camera name -> ours, where they differ."""
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        folder = resolve_pretrained(path_or_hub_id)
        cfg = PreTrainedConfig.from_pretrained(folder)
        cfg.device, cfg.pretrained_path = device, folder
        inputs = match_features(cfg, observation_space, action_dim, camera_map or {}, str(path_or_hub_id))
        moved = relocate_vlm(cfg, folder, str(path_or_hub_id))
        missing = [f for f in PROCESSOR_FILES if not (folder / f).is_file()]
        if missing:
            raise ValueError(
                f"base checkpoint '{path_or_hub_id}' has no saved processors ({', '.join(missing)}): "
                "save them with its policy, or migrate it with lerobot's processor migration "
                "script"
            )
        if not (folder / WEIGHTS_FILE).is_file():  # lerobot's π loaders would go on with random weights
            raise ValueError(f"base checkpoint '{path_or_hub_id}' has no {WEIGHTS_FILE}: its weights are missing")
        policy = get_policy_class(cfg.type).from_pretrained(folder, config=cfg)
        check_weights_fit(policy, folder, f"'{path_or_hub_id}' ({cfg.type})")
        policy.to(device).eval()
        policy.requires_grad_(False)
        # run where the policy runs, not where it trained; its tokenizer from where its VLM folder is now
        overrides = {"device_processor": {"device": device}, **moved}
        pre, post = make_pre_post_processors(cfg, pretrained_path=str(folder), preprocessor_overrides=overrides)
        if task is None and any(type(s).__name__ == "TokenizerProcessorStep" for s in pre.steps):
            raise ValueError(f"base checkpoint '{path_or_hub_id}' ({cfg.type}) needs a task description: pass task=")
        if task is not None:
            check_instruction_fits(pre, task, f"'{path_or_hub_id}' ({cfg.type})")
        base = cls(policy, pre, post, inputs, action_dim, task, name=f"{cfg.type}:{path_or_hub_id}")
        base.action_range = dataset_action_range(post, action_dim)
        base.state_stats = dataset_state_statistics(pre, inputs, observation_space["state"].shape[0])
        return base

    def reset(self) -> None:
        self.policy.reset()

    def predict_chunk(self, obs: dict, noise: np.ndarray | None = None) -> np.ndarray:
        """The next `chunk_size` actions, float32 [chunk_size, action_dim] in [-1, 1].

        `noise`: the initial noise of the policy's sampler, float32 of shape `noise_shape` (DSRL steers it); None:
        the policy draws its own. One-line ValueError for noise of another shape, non-finite noise, or noise given
        to a policy that takes none."""
        kwargs = {} if noise is None else {"noise": self._noise_tensor(noise)}
        with torch.inference_mode():
            batch = self.preprocessor(self._batch(obs))
            if self.closed_loop:
                actions = self.policy.select_action(batch)[:, None]  # [1, 1, A]
            else:
                if self.time_axis:
                    batch = {k: v[:, None] if k in self.inputs else v for k, v in batch.items()}
                actions = self.policy.predict_action_chunk(batch, **kwargs)[:, : self.chunk_size]  # [1, chunk, A]
            actions = self.postprocessor(actions)
        chunk = actions[0].to("cpu", torch.float32).numpy()
        return np.clip(chunk, -1.0, 1.0)

    def _noise_tensor(self, noise: np.ndarray) -> torch.Tensor:
        """The caller's noise as the policy's sampler takes it: [1, *noise_shape], on its device, in the dtype it
        draws its own noise in."""
        cfg = self.policy.config
        if self.noise_shape is None:
            steered = ", ".join((*FLOW_NOISE_TYPES, DIFFUSION_TYPE))
            why = (
                "it runs closed-loop through select_action, which draws its own noise"
                if self.closed_loop
                else (f"its sampler takes none (noise steering: {steered})")
            )
            raise ValueError(f"base '{self.name}' ({cfg.type}) takes no initial noise: {why}")
        z = np.asarray(noise)
        if z.shape != self.noise_shape:
            raise ValueError(
                f"noise for base '{self.name}' must have shape {self.noise_shape} (chunk length, noise "
                f"width), got {z.shape}"
            )
        if z.dtype.kind not in "fiu" or not np.all(np.isfinite(z)):
            raise ValueError(f"noise for base '{self.name}' must be finite real numbers (got NaN, inf or non-numbers)")
        param = next(self.policy.parameters())
        dtype = torch.float32 if cfg.type in FLOW_NOISE_TYPES else param.dtype
        return torch.as_tensor(z.astype(np.float32, copy=False))[None].to(param.device, dtype)

    def _batch(self, obs: dict) -> dict:
        """Our observation as the policy's preprocessor expects it: tensors with a batch dim, images float CHW."""
        return self.batch_of(one_row(obs))

    def batch_of(self, obs: dict) -> dict:
        """A batch of our observations (tensors: state [B, S], uint8 images [B, H, W, C]) as the policy's
        preprocessor expects it: on the CPU, images float CHW in [0, 1], the task text per row."""
        batch: dict = {}
        for key, source in self.inputs.items():
            if source == "state":
                batch[key] = obs["state"].to("cpu", torch.float32)
            else:
                image = obs["images"][source[7:]].cpu()
                batch[key] = image.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
        batch["task"] = task_texts(obs, self.task, len(obs["state"]))  # the env's instruction, else self.task
        for text in set(batch["task"]) - self.fitting_texts:  # an env's instruction: once per distinct text
            check_instruction_fits(self.preprocessor, text, f"'{self.name}'")
            self.fitting_texts.add(text)
        return batch


def one_row(obs: dict) -> dict:
    """One observation of ours as a batch of one: state [1, S], uint8 images [1, H, W, C], its instruction if any."""
    return {
        "state": torch.as_tensor(np.asarray(obs["state"], np.float32))[None],
        "images": {name: torch.from_numpy(np.ascontiguousarray(image))[None] for name, image in obs["images"].items()},
        **instruction_rows([obs]),
    }


def check_weights_fit(policy, folder: Path, name: str) -> None:
    """Refuse, in one line, a policy (`name`: its path and type) that its saved weights did not load into: lerobot's
    π0/π0.5 `from_pretrained` keep the random initialisation, printing a warning, where a weight's shape differs from
    what config.json builds. Shapes come from the file's header; keys lerobot renames while loading are skipped."""
    from safetensors import safe_open

    own = {k: tuple(v.shape) for k, v in policy.state_dict().items()}
    fitting = 0
    with safe_open(folder / WEIGHTS_FILE, "pt") as f:
        for key in f.keys():
            target = key if key in own else f"model.{key}"  # lerobot's π loaders add the prefix
            if target not in own:
                continue
            shape = tuple(f.get_slice(key).get_shape())
            if shape != own[target]:
                raise ValueError(
                    f"base checkpoint {name} does not fit the policy its {CONFIG_FILE} builds: '{key}' is "
                    f"{shape} in {WEIGHTS_FILE}, {own[target]} in the policy (a config edited or from another run?)"
                )
            fitting += 1
    if not fitting:
        raise ValueError(f"base checkpoint {name}: none of the weights in {WEIGHTS_FILE} belongs to its policy")


def relocate_vlm(cfg, folder: Path, name: str) -> dict:
    """A VLA built on a local VLM folder (`robo-rl vla train` writes <run>/vlm) whose run folder has moved since: its
    config.json and tokenizer step name the old absolute path. The folder of that name beside or above the checkpoint
    takes its place (`cfg.vlm_model_name`; the returned preprocessor overrides point the tokenizer there); {} where
    the VLM is a hub id or still where it was. One-line ValueError where it is nowhere."""
    vlm = getattr(cfg, "vlm_model_name", None)
    if not vlm or not Path(vlm).is_absolute() or Path(vlm).exists():
        return {}
    here = next((p / Path(vlm).name for p in [folder, *folder.parents][:6] if (p / Path(vlm).name).is_dir()), None)
    if here is None:
        raise ValueError(
            f"base checkpoint '{name}' builds on the VLM folder {vlm} (vlm_model_name in its {CONFIG_FILE}), which "
            f"does not exist, nor does a '{Path(vlm).name}' folder beside or above the checkpoint: copy the run's "
            f"VLM folder with it"
        )
    cfg.vlm_model_name = str(here)
    saved = json.loads((folder / PROCESSOR_FILES[0]).read_text()) if (folder / PROCESSOR_FILES[0]).is_file() else {}
    names = [
        s.get("config", {}).get("tokenizer_name")
        for s in saved.get("steps", ())
        if s.get("registry_name") == TOKENIZER_STEP
    ]
    gone = names and names[0] and not Path(names[0]).exists()
    return {TOKENIZER_STEP: {"tokenizer_name": str(here)}} if gone else {}


def noise_shape(cfg) -> tuple[int, int] | None:
    """(chunk length, width) of the initial noise that the open-loop sampler of a policy of this config takes;
    None for a policy type whose `predict_action_chunk` takes no noise."""
    if cfg.type in FLOW_NOISE_TYPES:
        return int(cfg.chunk_size), int(cfg.max_action_dim)
    if cfg.type == DIFFUSION_TYPE:
        return int(cfg.horizon), int(cfg.action_feature.shape[0])
    return None


def dataset_action_range(postprocessor, action_dim: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The action min/max of the dataset the policy was trained on, from its post-processor's saved statistics
    (clipped to our [-1, 1]); None where it kept none (e.g. a policy normalised by mean/std alone)."""
    for step in getattr(postprocessor, "steps", ()):
        stats = (getattr(step, "_tensor_stats", None) or {}).get(ACTION) or {}
        if "min" in stats and "max" in stats:
            low, high = (
                np.clip(stats[k].detach().to("cpu", torch.float32).numpy().reshape(-1), -1, 1) for k in ("min", "max")
            )
            if low.shape == high.shape == (action_dim,):
                return low, high
    return None


def dataset_state_statistics(preprocessor, inputs: dict[str, str], state_dim: int) -> tuple | None:
    """Mean and std of the state the policy was trained on, from its pre-processor's saved statistics of the
    input our state feeds (min/max give centre and half-range where no mean/std were kept); None where none."""
    keys = [key for key, source in inputs.items() if source == "state"]
    for step in getattr(preprocessor, "steps", ()):
        for key in keys:
            stats = (getattr(step, "_tensor_stats", None) or {}).get(key) or {}
            got = {
                k: v.detach().to("cpu", torch.float32).numpy().reshape(-1)
                for k, v in stats.items()
                if k in ("mean", "std", "min", "max")
            }
            if "mean" in got and "std" in got:
                mean, std = got["mean"], got["std"]
            elif "min" in got and "max" in got:
                mean, std = (got["max"] + got["min"]) / 2, (got["max"] - got["min"]) / 2
            else:
                continue
            if mean.shape == std.shape == (state_dim,):
                return mean, np.maximum(std, 1e-2)
    return None


def resolve_pretrained(path_or_hub_id: str | Path) -> Path:
    """The local `pretrained_model` folder of a path or hub id (from the hub cache, else downloaded)."""
    text = str(path_or_hub_id)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / CONFIG_FILE).is_file():
            raise ValueError(
                f"base checkpoint '{text}' is not a LeRobot pretrained_model folder: it has no {CONFIG_FILE}"
            )
        return path.resolve()
    if path.exists() or not HUB_ID.match(text):
        raise ValueError(f"base checkpoint '{text}' does not exist (a pretrained_model folder or a hub id)")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(text, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    try:
        return Path(snapshot_download(text))
    except (LocalEntryNotFoundError, OSError) as e:
        reason = str(e).splitlines()[0][:120]
        raise ValueError(
            f"base checkpoint '{text}' is no folder here, nor a hub id in the local Hugging Face cache, "
            f"and the network is not reachable ({reason}): pass a local pretrained_model folder"
        ) from None
    except HfHubHTTPError as e:
        raise ValueError(
            f"base checkpoint '{text}' could not be downloaded from the hub ({e.response.status_code}): "
            "check the id, or pass a local pretrained_model folder"
        ) from None


def match_features(cfg, observation_space, action_dim: int, camera_map: dict[str, str], name: str) -> dict[str, str]:
    """Each policy input feature -> where it comes from in our observation ("state", "images/<camera>");
    one-line ValueError naming the first feature that the task cannot provide or provides in another shape."""
    state_shape = tuple(observation_space["state"].shape)
    cameras = {cam: tuple(space.shape) for cam, space in observation_space["images"].spaces.items()}
    out = (cfg.output_features or {}).get(ACTION)
    if out is None:
        raise ValueError(f"base checkpoint '{name}' has no '{ACTION}' output feature")
    if tuple(out.shape) != (action_dim,):
        raise BaseMismatchError(
            f"base checkpoint '{name}' predicts '{ACTION}' of shape {tuple(out.shape)}, the task's "
            f"action dimension is {action_dim}"
        )
    inputs = {}
    for key, feature in (cfg.input_features or {}).items():
        shape = tuple(feature.shape)
        if key in STATE_INPUTS:
            if shape != state_shape:
                raise ValueError(
                    f"base checkpoint '{name}' expects '{key}' of shape {shape}, the task's state has "
                    f"shape {state_shape}"
                )
            inputs[key] = "state"
        elif key.startswith(IMAGE_PREFIX) or key == SINGLE_IMAGE:
            single = key == SINGLE_IMAGE
            policy_cam = "image" if single else key[len(IMAGE_PREFIX) :]
            cam = camera_map.get(policy_cam) or (_only_camera(cameras, key, name) if single else policy_cam)
            if cam not in cameras:
                raise ValueError(
                    f"base checkpoint '{name}' needs camera '{cam}' for '{key}', the task's cameras "
                    f"are {sorted(cameras)}"
                )
            h, w, c = cameras[cam]
            if shape != (c, h, w):
                raise ValueError(
                    f"base checkpoint '{name}' expects '{key}' of shape {shape} (CHW), the task's "
                    f"camera '{cam}' gives {(c, h, w)}"
                )
            inputs[key] = f"images/{cam}"
        else:
            raise ValueError(f"base checkpoint '{name}' needs input '{key}', which robo_rl observations do not have")
    return inputs


def _only_camera(cameras: dict, key: str, name: str) -> str:
    if len(cameras) != 1:
        raise ValueError(
            f"base checkpoint '{name}' needs '{key}' (one unnamed camera), the task's cameras are "
            f"{sorted(cameras)}: name one with camera_map"
        )
    return next(iter(cameras))
