"""The replay on disk: atomic segments, a manifest, corrupt data reported by name, exact restore."""

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from robo_rl.data.learner_replay import LearnerReplay
from robo_rl.data.replay import DiskReplay, ReplayBuffer
from robo_rl.data.schema import step_fields
from robo_rl.data.storage import SegmentStore, StorageError, read_segment
from tests.test_replay import synthetic_episode

FIELDS = step_fields(3, 2, {"cam": (8, 8)})


def episode(i, length=5, **kw):
    rec = synthetic_episode(i, length, **kw)
    rec["image/cam"] = np.zeros((length + 1, 8, 8, 3), np.uint8)
    rec["image/cam"][:, 0, 0, 0] = np.arange(length + 1)
    rec["image/cam"][:, 0, 0, 1] = i
    return rec


def replay_cfg(**kw):
    base = dict(
        storage="ram",
        capacity=1000,
        disk_capacity=1000,
        persist=True,
        flush_every_s=0.0,
        segment_max_mb=64,
        online_fraction=0.5,
        interventions_in_prior=True,
        verify_on_load=True,
    )
    return OmegaConf.create({**base, **kw})


def fill(store_root, n_segments=3):
    store = SegmentStore(store_root, FIELDS)
    for i in range(n_segments):
        store.write(episode(i), np.full(6, f"actor-{i % 2}", dtype=object), {f"actor-{i % 2}": [7, i + 1]})
    return store


def test_segments_round_trip_with_their_sources_and_message_numbers(tmp_path):
    fill(tmp_path / "s")
    store = SegmentStore(tmp_path / "s", FIELDS)
    assert [s.records for s in store.segments] == [6, 6, 6] and store.problems == []
    got = list(store.iter_segments())
    batch, sources = got[1][1], got[1][2]
    np.testing.assert_array_equal(batch["image/cam"], episode(1)["image/cam"])
    assert isinstance(batch["image/cam"], np.memmap)  # frames are mapped, not read
    assert set(sources) == {"actor-1"} and got[2][0].seqs == {"actor-0": [7, 3]}
    assert SegmentStore.open(tmp_path / "s").num_records == 18


def test_a_truncated_or_corrupt_segment_is_reported_by_name_and_the_others_load(tmp_path):
    store = fill(tmp_path / "s")
    first, second = (tmp_path / "s" / s.name for s in store.segments[:2])
    raw = bytearray(first.read_bytes())
    raw[read_segment(first)[1]["image/cam"].offset + 3] ^= 0xFF  # a flipped bit in the frames
    first.write_bytes(bytes(raw))
    second.write_bytes(second.read_bytes()[:-100])  # cut short
    with pytest.raises(StorageError, match="seg_000001.rrs is corrupt: field 'image/cam' fails its checksum"):
        read_segment(first)
    store = SegmentStore(tmp_path / "s", FIELDS)
    loaded = [seg.name for seg, _, _ in store.iter_segments()]
    assert loaded == ["seg_000003.rrs"]
    assert any("seg_000001.rrs is corrupt" in p for p in store.problems)
    assert any("seg_000002.rrs is truncated" in p for p in store.problems)


def test_a_kill_between_rename_and_manifest_and_a_half_written_file_are_both_handled(tmp_path):
    store = fill(tmp_path / "s", 2)
    manifest = tmp_path / "s" / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # torn last line: segment 2 not listed
    (tmp_path / "s" / "seg_000003.tmp").write_bytes(b"RRSEG half written")
    store = SegmentStore(tmp_path / "s", FIELDS)
    assert [s.name for s in store.segments] == ["seg_000001.rrs", "seg_000002.rrs"]  # whole segment adopted
    assert not (tmp_path / "s" / "seg_000003.tmp").exists() and store.problems == []
    store.write(episode(9), np.full(6, "a", dtype=object))
    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert [e["name"] for e in entries[1:]] == ["seg_000001.rrs", "seg_000002.rrs", "seg_000003.rrs"]


def test_a_reader_of_a_live_store_changes_nothing_a_writer_is_in_the_middle_of(tmp_path):
    # a retrain or a reviewer opens a run's store while its learner writes: the writer's half-written .tmp, a segment
    # renamed but not yet listed and a manifest line being appended are left as they are (a reader that deleted the
    # .tmp crashed the learner of a two-hour run when it renamed it); the reader still reads every whole segment
    fill(tmp_path / "s", 2)
    root, manifest = tmp_path / "s", tmp_path / "s" / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # segment 2 renamed, its line half appended
    (root / "seg_000003.tmp").write_bytes(b"RRSEG being written")
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    reader = SegmentStore.open(root)
    assert [s.name for s in reader.segments] == ["seg_000001.rrs", "seg_000002.rrs"] and reader.problems == []
    assert sum(len(b["step"]) for _, b, _ in reader.iter_segments()) == 12
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before  # not a byte changed
    with pytest.raises(StorageError, match="opened to read"):
        reader.write(episode(9), np.full(6, "a", dtype=object))


def test_a_store_of_another_layout_is_refused(tmp_path):
    fill(tmp_path / "s", 1)
    with pytest.raises(StorageError, match="another layout"):
        SegmentStore(tmp_path / "s", step_fields(4, 2, {"cam": (8, 8)}))
    with pytest.raises(StorageError, match="not a robo_rl replay store"):
        SegmentStore.open(tmp_path / "nothing")


@pytest.mark.parametrize("storage", ["ram", "disk"])
def test_restore_rebuilds_the_replay_row_for_row_and_reports_data_past_the_checkpoint(tmp_path, storage):
    cfg = replay_cfg(storage=storage, capacity=16, disk_capacity=16)
    live = LearnerReplay(cfg, FIELDS, tmp_path, demos=None)
    for i in range(4):  # two actors interleaved, 24 records into 16 rows, some of them a human's
        ep = episode(i, intervention_steps=(i + 1, i + 2))
        live.add("a" if i % 2 else "b", {k: v[:3] for k, v in ep.items()}, session=1, seq=2 * i + 1)
        live.add("a" if i % 2 else "b", {k: v[3:] for k, v in ep.items()}, session=1, seq=2 * i + 2)
        if i == 1:
            assert live.flush() == {"b": [1, 2], "a": [1, 4]}
            state = live.state()
    live.flush()
    live.close()
    again = LearnerReplay(cfg, FIELDS, tmp_path, demos=None)
    later, seqs = again.restore(state)
    assert seqs == {"b": [1, 6], "a": [1, 8]}
    assert sum(len(b["step"]) for _, b in later) == 12 and {a for a, _ in later} == {"a", "b"}
    for name in ("prev", "next", "row_uid", "prev_uid", "next_uid"):
        np.testing.assert_array_equal(getattr(again.online, name), getattr(live.online, name))
    assert len(live.online.intervention_rows()) > 0
    np.testing.assert_array_equal(again.online.intervention_rows(), live.online.intervention_rows())
    rng1, rng2 = np.random.default_rng(3), np.random.default_rng(3)
    b1, b2 = live.sample(32, rng1, 0.9, n_step=2), again.sample(32, rng2, 0.9, n_step=2)
    np.testing.assert_array_equal(b1["next_obs"]["images"]["cam"], b2["next_obs"]["images"]["cam"])
    np.testing.assert_array_equal(b1["reward"], b2["reward"])
    again.close()


def test_disk_replay_serves_the_same_transitions_as_the_ram_ring(tmp_path):
    store = fill(tmp_path / "s", 4)
    ram, disk = ReplayBuffer(100, FIELDS), DiskReplay(100, FIELDS)
    for seg, batch, sources in store.iter_segments():
        ram.add({k: np.asarray(v) for k, v in batch.items()}, sources)
        disk.add_segment(seg.index, batch, sources)
    rows = np.arange(ram.size)[ram._valid(np.arange(ram.size))]
    a, b = ram.gather(rows, 0.9, n_step=3), disk.gather(rows, 0.9, n_step=3)
    for key in ("reward", "discount", "action"):
        np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(a["obs"]["images"]["cam"], b["obs"]["images"]["cam"])
    np.testing.assert_array_equal(a["next_obs"]["images"]["cam"], b["next_obs"]["images"]["cam"])


def test_the_disk_ring_keeps_its_intervention_index_through_recycled_segments(tmp_path):
    store = SegmentStore(tmp_path / "s", FIELDS)
    for i in range(7):
        store.write(episode(i, intervention_steps=range(i % 3, 6, 2)), np.full(6, "a", dtype=object))
    disk = DiskReplay(15, FIELDS)  # 42 records through 15 rows
    for seg, batch, sources in store.iter_segments():
        disk.add_segment(seg.index, batch, sources)
        scan = np.flatnonzero(disk.data["intervention"][: disk.size])
        np.testing.assert_array_equal(disk.intervention_rows(), scan)
    rows = disk.sample_rows(100, np.random.default_rng(0), among=disk.interventions)
    assert disk.data["intervention"][rows].all()


def test_batches_mix_online_and_prior_data_by_the_configured_fraction(tmp_path):
    demos = episode(100, 40)
    cfg = replay_cfg(online_fraction=0.25, persist=False)
    replay = LearnerReplay(cfg, FIELDS, tmp_path, demos=demos)
    replay.add("a", episode(1, 40))
    replay.add("a", episode(2, 40, intervention_steps=range(1, 41)))  # a human drove this whole episode
    b = replay.sample(400, np.random.default_rng(0), 0.9)
    origin = b["obs"]["state"][:, 1]
    assert (origin[:100] != 100).all()  # the first quarter is online (episodes 1 and 2)
    prior = origin[100:]
    # the prior share pools demos (41 rows) and interventions (40 rows) by their sizes
    assert set(prior.tolist()) == {2.0, 100.0} and 0.35 < (prior == 2).mean() < 0.65
    assert b["intervention"][100:][prior == 2].all()
    off = LearnerReplay(
        replay_cfg(online_fraction=0.25, persist=False, interventions_in_prior=False), FIELDS, tmp_path, demos=demos
    )
    off.add("a", episode(2, 40, intervention_steps=range(1, 41)))
    assert set(off.sample(400, np.random.default_rng(0), 0.9)["obs"]["state"][100:, 1].tolist()) == {100.0}


def test_the_start_up_message_states_memory_and_disk_use(tmp_path):
    replay = LearnerReplay(
        replay_cfg(capacity=100_000),
        step_fields(18, 4, {"front": (128, 128), "wrist": (128, 128)}),
        tmp_path,
        demos=None,
        total_env_steps=50_000,
    )
    text = replay.usage()
    assert "98,465 B per record (98,304 B of frames)" in text and "RAM ring of 100,000 records (9.17 GB)" in text
    assert "disk about 4.59 GB for 50,000 env steps" in text
    replay.close()
