"""On-policy data on the learner: the decisions the current policy version made, assembled from the actors' step
records (the replay keeps every record as well: nothing recorded is lost, on-policy or not).

A decision is a step record with `extra/decision` = 1: its observation is the record before it, its chunk runs to
the next decision of the same episode (or the episode's end). For each decision: the chunk's discounted reward
Σ γ^j r_j, `discount` = γ^n (0 after a termination), the observation after the chunk, and `continues` (the next
row is the same episode's next decision, for GAE). Decisions made by an older policy version are dropped and
counted (`stale_steps`): they arrive from actors that had not yet applied the newest weights.
"""

from __future__ import annotations

import numpy as np

from robo_rl.data.replay import instructions_of
from robo_rl.data.schema import EXTRA


class Rollout:
    def __init__(self, gamma: float, env_steps: int, instructions: list[str] | None = None) -> None:
        self.gamma, self.wanted = gamma, int(env_steps)
        # the run's task table's instructions (the replay's list, append-only): where it names any, each decision's
        # observations carry their row's instruction, as the replay's samples do
        self.instructions = [] if instructions is None else instructions
        self.version = 1  # the policy version whose decisions are collected
        self.streams: dict[tuple, list[dict]] = {}  # (actor, episode) → its records not yet assembled, in order
        self.ready: list[dict] = []  # assembled decisions of `version`
        self.env_steps = 0  # in `ready`
        self.stale_steps = self.stale_decisions = 0  # dropped since the start (older versions)

    def add(self, actor: str, arrays: dict) -> None:
        """A stored message's records, appended to their episodes; complete decisions are assembled at once."""
        n = len(arrays["step"])
        keys = [
            k
            for k in arrays
            if k in ("state", "reward", "terminated", "truncated", "success", "step", "policy_version", "task")
            or k.startswith(("image/", EXTRA))
        ]
        touched = set()
        for i in range(n):
            key = (actor, int(arrays["episode_id"][i]))
            record = {k: arrays[k][i] for k in keys}
            if record["step"] == 0:
                self.streams[key] = [record]
            else:
                self.streams.setdefault(key, []).append(record)
            touched.add(key)
        for key in touched:
            self._assemble(key)

    def _assemble(self, key: tuple) -> None:
        records = self.streams[key]
        starts = [i for i, r in enumerate(records) if r["step"] > 0 and r[f"{EXTRA}decision"].reshape(-1)[0] > 0]
        last_consumed = 0
        for d, i in enumerate(starts):
            if i == 0:  # no observation before it (its episode's earlier records never came): skip the decision
                last_consumed = 1
                continue
            end = starts[d + 1] if d + 1 < len(starts) else None
            ends = [j for j in range(i, end or len(records)) if records[j]["terminated"] or records[j]["truncated"]]
            if end is None and not ends:
                break  # the chunk is still running
            stop = ends[0] + 1 if ends else end
            chunk = records[i:stop]
            if int(records[i]["policy_version"]) != self.version:
                self._drop(key, chunk)
            else:
                self._keep(key, records[i - 1], chunk)
            last_consumed = stop - 1  # the chunk's last record is the next decision's observation
        if any(r["terminated"] or r["truncated"] for r in records[last_consumed:]):
            del self.streams[key]
        else:
            self.streams[key] = records[last_consumed:]

    def _drop(self, key: tuple, chunk: list[dict]) -> None:
        """A decision of an older policy version: counted, not kept."""
        self.stale_steps += len(chunk)
        self.stale_decisions += 1

    def _keep(self, key: tuple, before: dict, chunk: list[dict]) -> None:
        self.ready.append(self._row(key, before, chunk))
        self.env_steps += len(chunk)

    def _row(self, key: tuple, before: dict, chunk: list[dict]) -> dict:
        """One decision: its observation, its chunk's records, discounted reward and discount."""
        rewards = np.array([r["reward"] for r in chunk], np.float64)
        last = chunk[-1]
        return {
            "key": key,
            "before": before,
            "last": last,
            "first": chunk[0],
            "n": len(chunk),
            "reward": float((self.gamma ** np.arange(len(chunk)) * rewards).sum()),
            "return": float(rewards.sum()),
            "discount": 0.0 if last["terminated"] else self.gamma ** len(chunk),
        }

    def stats(self) -> dict:
        """The rollout's own figures for the iteration's metrics (cumulative since the start)."""
        return {"stale_steps_dropped": self.stale_steps}

    def take(self, extras: tuple[str, ...]) -> dict:
        """The assembled decisions as arrays, each episode's together and in order (`continues` marks a row whose
        next row is its episode's next decision), and a fresh start."""
        streams = {}
        for row in self.ready:  # each episode's decisions together, in their order
            streams.setdefault(row["key"], []).append(row)
        rows = [row for stream in streams.values() for row in stream]
        cams = [k for k in rows[0]["before"] if k.startswith("image/")] if rows else []

        def obs(which: str) -> dict:
            out = {
                "state": np.stack([r[which]["state"] for r in rows]),
                "images": {c[6:]: np.stack([r[which][c] for r in rows]) for c in cams},
            }
            if self.instructions and rows and "task" in rows[0][which]:
                out["instruction"] = instructions_of(np.array([r[which]["task"] for r in rows]), self.instructions)
            return out

        # a row continues into the next row only if that row is the following decision of the same episode: its
        # observation is this chunk's last record (an episode that ended starts the next from a reset record)
        same = [rows[k + 1]["before"] is rows[k]["last"] for k in range(len(rows) - 1)] + [False] if rows else []
        batch = {
            "obs": obs("before"),
            "next_obs": obs("last"),
            "reward": np.array([r["reward"] for r in rows], np.float32),
            "discount": np.array([r["discount"] for r in rows], np.float32),
            "truncated": np.array([bool(r["last"]["truncated"]) and not r["last"]["terminated"] for r in rows], bool),
            "continues": np.array(same, bool),
            "steps": np.array([r["n"] for r in rows], np.int64),
            "extras": {
                name: np.stack([np.asarray(r["first"][f"{EXTRA}{name}"], np.float32) for r in rows]) for name in extras
            },
        }
        self.ready, self.env_steps = [], 0  # the learner sets `version` when it publishes the next weights
        return batch
