"""The intervention page during an evaluation on a robot: the cameras, the episode, and the prompt to reset the scene.

`robo-rl eval ... gui=true` (with `robo-rl gui` serving the page) shows the evaluation like an actor: its cameras
and episode while the policy runs, and between episodes the mode PAUSED with the prompt as the notice. The page's
Success button answers the prompt: it reaches the evaluation's web device, which the prompt reads beside the
configured devices and the terminal.
"""

from __future__ import annotations

import time

from robo_rl.gui.bridge import GuiBridge, attach_web_device
from robo_rl.transport.security import curve_keys, is_loopback


class EvalView:
    def __init__(self, cfg, env) -> None:
        """`env` gains the page's web device (an intervention wrapper is added when it has none): `self.env`."""
        from robo_rl.envs.wrappers import find_wrapper
        from robo_rl.teleop.intervention import InterventionWrapper

        g = cfg.gui
        self.env, web = attach_web_device(env)
        curve = None if is_loopback(g.zmq_host) else curve_keys(cfg, cfg.actor.id)
        self.bridge = GuiBridge(
            cfg.actor.id,
            g.zmq_host,
            g.zmq_port,
            web,
            find_wrapper(self.env, InterventionWrapper),
            frame_hz=g.frame_hz,
            deadman="continue",
            deadman_timeout_s=g.deadman_timeout_s,
            curve=curve,
        )
        self.episode, self.t, self.ret = 0, 0, 0.0
        self.started = time.monotonic()

    def _tick(self, mode: str, notice: str | None, obs: dict | None = None) -> None:
        meta = {
            "mode": mode,
            "controller": None,
            "policy_version": 0,
            "policy_age_s": time.monotonic() - self.started,
            "episode": self.episode,
            "step": self.t,
            "reward": 0.0,
            "return": self.ret,
            "notice": notice,
        }
        images = (obs or {}).get("images") if obs is not None and self.bridge.wants_frame() else None
        self.bridge.tick(meta, images or None)

    def waiting(self, prompt: str) -> None:
        """Between episodes: the robot is still and a person is asked to do something (shown as the notice)."""
        self._tick("PAUSED", prompt[:200])

    def step(self, obs: dict, reward: float) -> None:
        self.t, self.ret = self.t + 1, self.ret + float(reward)
        self._tick("POLICY", None, obs)

    def episode_end(self, success: bool, ended_by: str) -> None:
        self.bridge.episode_end(
            {
                "episode": self.episode,
                "success": bool(success),
                "ended_by": str(ended_by),
                "length": self.t,
                "return": self.ret,
                "intervention_steps": 0,
            }
        )
        self.episode, self.t, self.ret = self.episode + 1, 0, 0.0

    def close(self) -> None:
        self.bridge.close()
