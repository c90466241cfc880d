"""What of a condition a policy cannot perceive: a perturbation that changes only the camera images (light, camera
pose and field of view, pixel noise) leaves a state-only policy's observations exactly nominal, so its success there
is nominal success again, not robustness. The reports mark such conditions and keep them out of the success chart."""

from __future__ import annotations

# env.randomize keys (sim/randomize.py) that change what cameras see and nothing a state vector holds
CAMERA_ONLY_KEYS = ("light_scale", "camera_pos_noise_m", "camera_fovy_deg", "camera_fovy_scale", "image_noise_std")
STATE_ONLY = "state-only"


def camera_only(override: str) -> bool:
    """An `env.randomize.<key>=...` override whose key changes only camera images."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.startswith("env.randomize.") and key.removeprefix("env.randomize.") in CAMERA_ONLY_KEYS


def unseen_overrides(overrides: list[str], cameras: list[str] | None) -> list[str]:
    """The overrides a policy observing `cameras` cannot perceive (none when it has cameras or it is not known)."""
    if cameras is None or cameras:
        return []
    return [o for o in overrides if camera_only(o)]


def seen_part(overrides: list[str], unseen: list[str]) -> str:
    """'all' of the condition is observable, only 'part' of it, or 'none' (the policy sees the nominal task)."""
    if not unseen:
        return "all"
    return "none" if len(unseen) == len(overrides) else "part"


def unseen_note(c: dict) -> str:
    """A condition's note in the reports: '' when the policy perceives all of it."""
    if c.get("seen", "all") == "all":
        return ""
    if c["seen"] == "none":
        return f"not seen by this policy: {STATE_ONLY}"
    return f"camera, light and image-noise parts not seen by this policy: {STATE_ONLY}"
