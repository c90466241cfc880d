"""The GUI process: actors on one side (ZeroMQ), pages on the other (a WebSocket), so no control loop ever waits on a
browser. Started by `robo-rl gui` or by `robo-rl train gui=true`.

Page → server (JSON text, `v` 1): hello {name}, heartbeat, command {actor, command}, key {actor, key, down}, and the
live checks reward_threshold, reward_mark (robo_rl/gui/checks_view.py). Server → page: welcome {client, name, deadman,
keys}, state {t, actors, learner, queue} (`gui.state_hz` times a second, a full snapshot: a reloaded page has
everything at once), refused {actor, command, reason}, error {reason}, info.

Control: the first page to send an actor a control input (a key, or taking over) holds that actor until its human
hands back (the actor reports the policy in control again) or the page goes; another page's inputs to it are refused
with the holder named, except e-stop, which anyone may press. A page that goes while holding control, or the last
page going (after `gui.deadman_grace_s`, so a reload is not one), makes the actor apply its dead-man policy.

Off loopback the page needs `gui.token` (`?token=` in its URL); the actors' socket needs CURVE keys there.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hmac
import itertools
import json
import logging
import secrets
import time
from pathlib import Path

import cv2
import numpy as np
import zmq
import zmq.asyncio

from robo_rl.gui import checks_view, messages
from robo_rl.teleop.keys import DEFAULT_KEYS
from robo_rl.transport.codec import MessageError, decode, encode
from robo_rl.transport.link import endpoint
from robo_rl.transport.security import curve_keys, is_loopback

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
RECENT = 50  # finished episodes kept per actor for the rates and plots
TRACE = 300  # rewards of the running episode shown
PAGE_KINDS = ("hello", "heartbeat", "command", "key", *checks_view.KINDS)
ALIVE_S = 3.0  # an actor silent for longer shows as offline
MAX_MESSAGE = 4096  # characters of one page message


class ActorState:
    def __init__(self, actor_id: str) -> None:
        self.id = actor_id
        self.tick: dict = {}
        self.seen = 0.0
        self.rewards: collections.deque = collections.deque(maxlen=TRACE)
        self.recent: collections.deque = collections.deque(maxlen=RECENT)
        self.cameras: dict[str, dict] = {}
        self.views: dict[str, dict] = {}
        self.holder: str | None = None  # the page (client id) holding control
        self.holder_input = 0.0  # when the holder last sent an input
        self.checks = checks_view.ChecksState()  # the learned reward's scores, the reset state

    def on_tick(self, meta: dict, arrays: dict, quality: int) -> None:
        last = self.tick
        if meta["episode"] != last.get("episode") or meta["step"] < last.get("step", 0):
            self.rewards.clear()
        if meta["step"] > 0 and meta["step"] != last.get("step"):
            self.rewards.append(float(meta["reward"]))
        self.tick, self.seen = meta, time.monotonic()
        self.checks.on_tick(meta)
        for name, image in arrays.items():
            kind, _, cam = name.partition("/")
            frame = _frame(cam, image, meta["t"], quality)
            if frame is not None:
                (self.cameras if kind == "cam" else self.views)[cam] = frame

    def snapshot(self, names: dict[str, str]) -> dict:
        t = self.tick
        recent = list(self.recent)
        steps = sum(e["length"] for e in recent)
        return {
            "id": self.id,
            "alive": time.monotonic() - self.seen < ALIVE_S,
            "last_seen_s": time.monotonic() - self.seen,
            "mode": t.get("mode", "POLICY"),
            "controller": t.get("controller"),
            "holder": names.get(self.holder) if self.holder else None,
            "policy_version": t.get("policy_version", -1),
            "policy_age_s": t.get("policy_age_s"),
            "episode": t.get("episode", 0),
            "step": t.get("step", 0),
            "return": t.get("return", 0.0),
            "rewards": list(self.rewards),
            "success_prob": t.get("success_prob"),
            "interventions": t.get("interventions", []),
            "cameras": list(self.cameras.values()),
            "view": next(iter(self.views.values()), None),
            "recent": recent,
            "intervention_rate": sum(e["intervention_steps"] for e in recent) / steps if steps else 0.0,
            "success_rate": sum(e["success"] for e in recent) / len(recent) if recent else 0.0,
            "loop": t.get("loop", {}),
            "notice": t.get("notice"),
            "safety": t.get("safety"),
            "safety_counts": t.get("safety_counts", {}),
            **self.checks.fields(t),
        }


def _frame(name: str, image: np.ndarray, t: float, quality: int) -> dict | None:
    if image.ndim == 2:
        image = image[..., None]
    if image.ndim != 3 or image.shape[2] not in (1, 3) or image.dtype != np.uint8:
        log.warning("gui: camera %s sent a %s %s frame, not HxWx{1,3} uint8: not shown", name, image.shape, image.dtype)
        return None
    bgr = image if image.shape[2] == 1 else image[..., ::-1]
    ok, jpeg = cv2.imencode(".jpg", np.ascontiguousarray(bgr), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        return None
    h, w = image.shape[:2]
    return {"name": name, "w": int(w), "h": int(h), "t": float(t), "jpeg": base64.b64encode(jpeg).decode("ascii")}


class PageError(ValueError):
    """A page's message that cannot be accepted; the text says why."""


def parse_page_message(text: str) -> dict:
    if len(text) > MAX_MESSAGE:
        raise PageError(f"message of {len(text)} characters exceeds {MAX_MESSAGE}")
    try:
        msg = json.loads(text)
    except json.JSONDecodeError as e:
        raise PageError(f"not JSON ({e.msg})") from None
    if not isinstance(msg, dict):
        raise PageError("not a JSON object")
    if msg.get("v") != 1:
        raise PageError(f"schema version {str(msg.get('v'))[:20]}, this GUI speaks 1")
    kind = msg.get("type")
    if kind not in PAGE_KINDS:
        raise PageError(f"unknown type {str(kind)[:40]!r} (one of {', '.join(PAGE_KINDS)})")
    if kind not in ("hello", "heartbeat") and not isinstance(msg.get("actor"), str):
        raise PageError(f"'{kind}' needs an 'actor' id")
    if kind == "command" and msg.get("command") not in messages.COMMANDS:
        raise PageError(f"unknown command {str(msg.get('command'))[:40]!r}")
    if kind == "key" and not (
        isinstance(msg.get("key"), str) and 0 < len(msg["key"]) <= 32 and isinstance(msg.get("down"), bool)
    ):
        raise PageError("'key' needs a short 'key' text and a boolean 'down'")
    if kind == "hello" and not (isinstance(msg.get("name", ""), str) and len(msg.get("name", "")) <= 64):
        raise PageError("'hello' name must be a text of at most 64 characters")
    if kind in checks_view.KINDS and checks_view.problem(msg):
        raise PageError(checks_view.problem(msg))
    return msg


class GuiHub:
    """The GUI's state: actors (from ZeroMQ) and pages (WebSockets), and who holds control of which actor."""

    def __init__(self, cfg, token: str | None = None) -> None:
        self.cfg = cfg
        g = cfg.gui
        self.quality = int(g.jpeg_quality)
        self.actors: dict[str, ActorState] = {}
        self.pages: dict[str, object] = {}  # client id → websocket
        self.names: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._last_page_gone: float | None = None
        self.counts = collections.Counter()
        self.news = asyncio.Event()  # an actor said something new since the last snapshot
        curve = None if is_loopback(g.zmq_host) else curve_keys(cfg, "learner")
        if curve is None and not is_loopback(g.zmq_host):  # checked before any socket exists
            raise ValueError(
                f"gui.zmq_host={g.zmq_host} is not loopback: set transport.curve_keys_dir so actors "
                "authenticate (robo-rl keys generate), or bind gui.zmq_host=127.0.0.1"
            )
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        try:
            if curve is not None:
                self._auth = curve.start_authenticator(self.ctx)
                curve.make_server(self.sock)
            self.sock.bind(endpoint(g.zmq_host, g.zmq_port))
        except Exception:  # a port in use: nothing left open behind the error
            self.close()
            raise
        self.token = token

    # --- actors --------------------------------------------------------------------------------------------
    async def actor_loop(self) -> None:
        while True:
            frames = await self.sock.recv_multipart()
            ident, body = frames[0], frames[1:]
            try:
                kind, meta, arrays = decode(body)
                messages.check(kind, meta, messages.TO_GUI)
                actor_id = ident.decode("utf-8", "replace")
                if meta["actor"] != actor_id:
                    raise MessageError(f"says it is actor {meta['actor']!r} on the link of {actor_id!r}")
            except MessageError as e:
                self.counts["bad_actor_messages"] += 1
                log.warning("gui: dropped a message from an actor: %s", e)
                continue
            state = self.actors.setdefault(actor_id, ActorState(actor_id))
            self.news.set()
            if kind == "gui_tick":
                state.on_tick(meta, arrays, self.quality)
                self._maybe_release(state)
            else:
                state.recent.append(
                    {k: meta[k] for k in ("episode", "success", "ended_by", "length", "return", "intervention_steps")}
                )

    async def send_actor(self, actor_id: str, kind: str, meta: dict) -> None:
        try:
            await self.sock.send_multipart([actor_id.encode(), *encode(kind, meta)], zmq.NOBLOCK)
        except zmq.ZMQError as e:  # an actor gone: nothing to tell it
            log.debug("gui: could not reach %s: %s", actor_id, e)

    async def presence_loop(self) -> None:
        """Tell every actor a few times a second that the GUI is there and how many pages watch; apply the dead
        man once the last page has been gone for the grace period."""
        grace = float(self.cfg.gui.deadman_grace_s)
        while True:
            gone = self._last_page_gone
            if gone is not None and not self.pages and time.monotonic() - gone >= grace:
                self._last_page_gone = None
                for actor_id in list(self.actors):
                    await self.send_actor(actor_id, "gui_deadman", {"reason": "no page watches any more"})
            for actor_id in list(self.actors):
                await self.send_actor(actor_id, "gui_presence", {"pages": len(self.pages)})
            await asyncio.sleep(0.2)

    def _maybe_release(self, state: ActorState) -> None:
        """The holder's human handed back (the policy is in control again, a while after the last input)."""
        if state.holder and state.tick.get("mode") != "HUMAN" and time.monotonic() - state.holder_input > 1.0:
            state.holder = None

    # --- pages ---------------------------------------------------------------------------------------------
    def state(self) -> dict:
        learner = {}
        for actor in self.actors.values():  # every actor hears the same learner: take the freshest
            learner = actor.tick.get("learner") or learner
        if learner:
            learner = {**learner, "buffer": {k[7:]: v for k, v in learner.items() if k.startswith("buffer_")}}
        return {
            "v": 1,
            "type": "state",
            "t": time.time(),
            "learner": learner or None,
            "actors": [a.snapshot(self.names) for a in self.actors.values()],
            "queue": checks_view.queue(self.actors.values()),
        }

    def authorised(self, token: str | None) -> bool:
        return not self.token or (token is not None and hmac.compare_digest(token, self.token))

    def add_page(self, ws) -> str:
        client = f"c{next(self._ids)}"
        self.pages[client], self.names[client] = ws, client
        self._last_page_gone = None
        return client

    async def remove_page(self, client: str) -> None:
        self.pages.pop(client, None)
        for state in self.actors.values():
            if state.holder == client:  # gone while holding control: the dead man, now
                state.holder = None
                await self.send_actor(state.id, "gui_release", {"by": self.names.get(client, client)})
                await self.send_actor(
                    state.id,
                    "gui_deadman",
                    {"reason": f"the page of {self.names.get(client, client)}, which held control, went away"},
                )
        if not self.pages:
            self._last_page_gone = time.monotonic()
        log.info("gui: page %s (%s) left; %d remain", client, self.names.get(client), len(self.pages))

    async def on_page_message(self, client: str, msg: dict) -> dict | None:
        """Handle one parsed page message; returns a reply for that page, or None."""
        kind = msg["type"]
        if kind == "hello":
            self.names[client] = msg.get("name") or client
            name, deadman = self.names[client], self.cfg.gui.deadman
            return {"v": 1, "type": "welcome", "client": client, "name": name, "deadman": deadman, "keys": DEFAULT_KEYS}
        if kind == "heartbeat":
            return None
        actor_id = msg["actor"]
        state = self.actors.get(actor_id)
        if state is None:
            return {"v": 1, "type": "error", "reason": f"no actor {actor_id[:64]!r} is connected"}
        command = msg.get("command") or (f"key {msg['key']}" if kind == "key" else kind)
        if state.holder not in (None, client) and msg.get("command") != "estop":
            holder = self.names.get(state.holder, state.holder)
            log.warning(
                "gui: refused %s from %s: %s is controlled by %s", command, self.names[client], actor_id, holder
            )
            return checks_view.refused(actor_id, command, f"{actor_id} is controlled by {holder}")
        by = self.names[client]
        if kind in checks_view.KINDS:  # the learned reward's threshold, a mark: refused here if the actor has none
            why = checks_view.refusal(state.tick, msg)
            if why:
                log.warning("gui: refused %s from %s: %s", kind, by, why)
                return checks_view.refused(actor_id, kind, why)
            return await self.send_actor(actor_id, *checks_view.to_actor(msg, by))  # None: no reply
        if kind == "key" or msg["command"] == "intervention_toggle":
            state.holder, state.holder_input = client, time.monotonic()
        if kind == "key":
            await self.send_actor(actor_id, "gui_key", {"key": msg["key"], "down": msg["down"]})
        else:
            await self.send_actor(actor_id, "gui_command", {"command": msg["command"], "by": by})
        return None

    def close(self) -> None:
        if hasattr(self, "_auth"):
            self._auth.stop()
        self.ctx.destroy(linger=0)  # every socket of it closed, then the context


def page_token(cfg) -> str | None:
    """`gui.token`, or a fresh one where the page is served off loopback (it is never open there)."""
    return cfg.gui.token or (None if is_loopback(cfg.gui.host) else secrets.token_urlsafe(16))


def make_app(cfg, token: str | None = None):
    """The Starlette app (its hub, with the actors' socket, is made when the app starts); pages need `token`."""
    if token is None and not is_loopback(cfg.gui.host):
        raise ValueError(f"gui.host={cfg.gui.host} is not loopback: the page needs a token there (page_token)")
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles
    from starlette.websockets import WebSocket, WebSocketDisconnect

    holder: dict = {}

    @asynccontextmanager
    async def lifespan(app):
        hub = GuiHub(cfg, token)
        holder["hub"] = hub
        tasks = [asyncio.create_task(c) for c in (hub.actor_loop(), hub.presence_loop(), broadcast(hub))]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            hub.close()

    async def broadcast(hub: GuiHub) -> None:
        """A snapshot to every page as soon as an actor has news (a new frame is on the page within milliseconds),
        at most `gui.state_hz` times a second, and at least once a second (ages and liveness move on)."""
        period = 1.0 / float(cfg.gui.state_hz)
        while True:
            try:
                await asyncio.wait_for(hub.news.wait(), timeout=1.0)
            except TimeoutError:
                pass
            hub.news.clear()
            if not hub.pages:
                continue
            sent = time.monotonic()
            text = json.dumps(hub.state())
            for client, ws in list(hub.pages.items()):
                try:
                    await ws.send_text(text)
                except Exception:  # noqa: BLE001 - a page that went away; its handler removes it
                    hub.pages.pop(client, None)
            await asyncio.sleep(max(0.0, period - (time.monotonic() - sent)))

    async def index(request):
        hub = holder["hub"]
        if not hub.authorised(request.query_params.get("token")):
            return Response("a token is required: open the URL `robo-rl gui` printed (?token=...)\n", 403)
        return FileResponse(STATIC / "index.html")

    async def health(request):
        hub = holder["hub"]
        if not hub.authorised(request.query_params.get("token")):
            return Response("token required\n", 403)
        return JSONResponse({"actors": list(hub.actors), "pages": len(hub.pages), **dict(hub.counts)})

    async def ws_endpoint(ws: WebSocket):
        hub = holder["hub"]
        if not hub.authorised(ws.query_params.get("token")):
            log.warning("gui: refused a page from %s without the token", ws.client.host if ws.client else "?")
            await ws.close(code=1008, reason="token required")
            return
        await ws.accept()
        client = hub.add_page(ws)
        name = ws.query_params.get("name")
        if name:
            hub.names[client] = name[:64]
        log.info("gui: page %s connected from %s", client, ws.client.host if ws.client else "?")
        try:
            while True:
                text = await ws.receive_text()
                try:
                    reply = await hub.on_page_message(client, parse_page_message(text))
                except PageError as e:
                    hub.counts["bad_page_messages"] += 1
                    log.warning("gui: bad message from page %s: %s", client, e)
                    reply = {"v": 1, "type": "error", "reason": f"bad message: {e}"}
                if reply is not None:
                    await ws.send_text(json.dumps(reply))
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            await hub.remove_page(client)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/health", health),
            WebSocketRoute("/ws", ws_endpoint),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        lifespan=lifespan,
    )
    app.state.holder = holder
    return app


def serve(cfg) -> None:
    """Run the GUI until interrupted (uvicorn on gui.host:gui.port)."""
    import uvicorn

    token = page_token(cfg)
    app = make_app(cfg, token)
    g = cfg.gui
    config = uvicorn.Config(app, host=g.host, port=int(g.port), log_level="warning", ws="websockets-sansio")
    server = uvicorn.Server(config)
    url = f"http://{g.host}:{g.port}/" + (f"?token={token}" if token else "")
    print(f"intervention GUI: {url} (actors connect to {endpoint(g.zmq_host, g.zmq_port)})", flush=True)
    server.run()
