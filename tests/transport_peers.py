"""Peer processes for transport fault tests: `python -m tests.transport_peers sink|source ...`.

sink:   a learner-side LearnerLink that stores each accepted message's (actor, payload, session, seq, session
        token hash) in a file, fsyncs, and only then acknowledges it; a restarted sink reads the file first and
        tells the link what it already holds (the contract a durable learner follows: a kill between the fsync
        and the ack must not store the resent message twice; the stored hash lets the same process continue).
source: an actor-side ActorLink that sends N numbered step batches at a fixed rate, then waits until all
        are acknowledged (with --start-on-stdin, it says hello only once a line comes on its stdin: a process
        started beforehand, so its hello can follow an event by milliseconds).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.link import LearnerLink


def sink(args) -> None:
    link = LearnerLink("127.0.0.1", *args.ports, config_hash="test")
    link.auto_ack = False
    if os.path.exists(args.out):
        held = {}
        for line in open(args.out).read().splitlines():
            if len(parts := line.split()) == 5:  # a line torn by the kill was never acknowledged
                held[parts[0]] = (int(parts[2]), int(parts[3]), parts[4])  # sessions are ints on the wire
        for actor, (session, seq, token_hash) in held.items():
            link.expect(actor, session, seq, token_hash)
    with open(args.out, "a") as f:
        while True:
            for actor, arrays, session, seq, token_hash in link.poll(timeout_ms=10):
                f.write(f"{actor} {int(arrays['payload'][0])} {session} {seq} {token_hash}\n")
                f.flush()
                os.fsync(f.fileno())
                link.ack(actor, link.actors[actor]["acked"])


def source(args) -> None:
    if args.start_on_stdin:
        sys.stdin.readline()
    link = ActorLink("127.0.0.1", *args.ports, actor_id=args.actor, learner_timeout_s=1.0)
    link.hello("test", timeout_s=10)
    for i in range(args.count):
        link.send_steps({}, {"payload": np.array([i], np.int64)})
        deadline = time.monotonic() + args.period
        while time.monotonic() < deadline:
            link.poll(timeout_ms=2)
        if i % 10 == 0:
            link.heartbeat()
    deadline = time.monotonic() + 60
    while link.unacked and time.monotonic() < deadline:
        link.poll(timeout_ms=10)
        link.heartbeat()
    print(f"unacked={len(link.unacked)} dropped={link.dropped_messages}", flush=True)
    link.close(0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["sink", "source"])
    p.add_argument("--ports", type=int, nargs=3, required=True)
    p.add_argument("--out", default="")
    p.add_argument("--actor", default="actor-0")
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--period", type=float, default=0.01)
    p.add_argument("--start-on-stdin", action="store_true")
    a = p.parse_args()
    sink(a) if a.role == "sink" else source(a)
