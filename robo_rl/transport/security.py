"""CURVE authentication for links that leave the machine.

Loopback binds need nothing. Any other bind requires CURVE: the learner has a keypair, every actor
has one, and the learner accepts only actors whose public key is in `<keys_dir>/authorized/`.
Key files are ZeroMQ's certificate format (`<name>.key` public, `<name>.key_secret` secret).
"""

from __future__ import annotations

import ipaddress
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from robo_rl.transport.errors import TransportError

LEARNER_KEY = "learner"
AUTHORIZED_DIR = "authorized"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind_allowed(host: str, curve: CurveKeys | None) -> None:
    if not is_loopback(host) and curve is None:
        raise TransportError(
            f"refusing to bind {host} without authentication: create keys with `robo-rl keys generate <dir>` "
            "and set transport.curve_keys_dir=<dir>, or bind transport.host=127.0.0.1"
        )


def key_speaks_for(key_name: str | None, actor_id: str) -> bool:
    """With CURVE, the key named `arm1` may speak for actor ids `arm1` and `arm1.<anything>`, and no others."""
    return key_name is not None and (actor_id == key_name or actor_id.startswith(key_name + "."))


def generate_keys(keys_dir: str | Path, actor_ids: list[str]) -> list[Path]:
    """Write a learner keypair and one per actor; authorise the actors' public keys. Returns the files."""
    keys_dir = Path(keys_dir)
    (keys_dir / AUTHORIZED_DIR).mkdir(parents=True, exist_ok=True)
    written = []
    for name in [LEARNER_KEY, *actor_ids]:
        if (keys_dir / f"{name}.key_secret").exists():
            raise FileExistsError(f"{keys_dir / name}.key_secret exists; remove it to make a new key")
        public, secret = zmq.auth.create_certificates(str(keys_dir), name)
        Path(secret).chmod(0o600)
        written += [Path(public), Path(secret)]
        if name != LEARNER_KEY:
            shutil.copy(public, keys_dir / AUTHORIZED_DIR / f"{name}.key")
    return written


@dataclass
class CurveKeys:
    """The keys one process needs: its own keypair, the learner's public key, the authorised directory."""

    public: bytes
    secret: bytes
    server_public: bytes
    authorized_dir: Path

    @classmethod
    def load(cls, keys_dir: str | Path, name: str) -> CurveKeys:
        keys_dir = Path(keys_dir)
        secret_file = keys_dir / f"{name}.key_secret"
        if not secret_file.exists():
            raise FileNotFoundError(f"no secret key {secret_file}: run `robo-rl keys generate {keys_dir} {name}`")
        public, secret = zmq.auth.load_certificate(str(secret_file))
        server_public, _ = zmq.auth.load_certificate(str(keys_dir / f"{LEARNER_KEY}.key"))
        return cls(public, secret, server_public, keys_dir / AUTHORIZED_DIR)

    def authorized_names(self) -> dict[str, str]:
        """ZAP user id (the z85 text of a public key, as pyzmq's authenticator reports it) → the key's name."""
        names = {}
        for public_file in sorted(self.authorized_dir.glob("*.key")):
            try:
                public, _ = zmq.auth.load_certificate(str(public_file))
            except (OSError, ValueError):
                continue  # the authenticator skips it too
            names[public.decode("ascii")] = public_file.stem
        return names

    def start_authenticator(self, ctx: zmq.Context) -> ThreadAuthenticator:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=str(self.authorized_dir))
        return auth

    def make_server(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey, sock.curve_publickey, sock.curve_server = self.secret, self.public, True

    def make_client(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = self.secret, self.public, self.server_public


def curve_keys(cfg, name: str) -> CurveKeys | None:
    """The CURVE keys of process `name` when `transport.curve_keys_dir` is set, else None (loopback only)."""
    keys_dir = cfg.transport.curve_keys_dir
    return CurveKeys.load(keys_dir, name) if keys_dir else None
