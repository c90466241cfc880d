"""Replay on disk: segment files of step records, each written atomically, listed in a manifest.

A store is a folder:

    manifest.jsonl        line 1: the store header (format, schema version, fields); then one line per segment
    tasks.json            the run's task table: the instructions the records' `task` field indexes (if any)
    seg_000001.rrs        step records in arrival order, raw little-endian arrays, memory-mappable
    seg_000002.rrs        ...

A segment file is `MAGIC`, an 8-byte header length, a JSON header (fields with dtype, shape, offset,
size and CRC-32; the per-record sources; the last sequence number stored per actor session) and the
field arrays, each 64-byte aligned. It is written to a `.tmp` file, fsynced and renamed, so a reader
never sees half a segment. The manifest is appended after the rename; a segment renamed in place
but missing from the manifest (a kill between the two) is adopted on the next load. A corrupt or
truncated segment is reported by name and skipped; the others load.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robo_rl.data.schema import SCHEMA_VERSION
from robo_rl.errors import UserError

log = logging.getLogger(__name__)

STORE_FORMAT = 1
MAGIC = b"RRSEG\x001\n"
TASKS_FILE = "tasks.json"
SOURCE_FIELD = "_source"  # per-record index into the segment's `sources` list
_SEG_RE = re.compile(r"^seg_(\d{6,})\.rrs$")
_ALIGN = 64


class StorageError(UserError, ValueError):
    """A store or segment that cannot be used; the text names the file."""


def fields_spec(fields: dict[str, tuple]) -> dict[str, list]:
    return {name: [np.dtype(dtype).str, list(shape)] for name, (shape, dtype) in fields.items()}


def record_nbytes(fields: dict[str, tuple]) -> int:
    return int(sum(np.dtype(dtype).itemsize * int(np.prod(shape)) for shape, dtype in fields.values()))


@dataclass
class Segment:
    name: str
    index: int
    records: int
    sources: list[str] = field(default_factory=list)
    seqs: dict[str, list] = field(default_factory=dict)  # actor → [session, last seq stored]
    # the messages whose records it holds: [actor, session, seq, session token hash] (see transport/link.py)
    messages: list[list] = field(default_factory=list)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(
    path: Path,
    batch: dict[str, np.ndarray],
    sources: np.ndarray,
    seqs: dict | None = None,
    messages: list | None = None,
) -> Segment:
    """Write records (a step batch) and their per-record source labels atomically to `path`."""
    names, codes = np.unique(np.asarray(sources, dtype=str), return_inverse=True)
    arrays = {**batch, SOURCE_FIELD: codes.astype(np.int16)}
    n = len(codes)
    header_fields, offset = {}, 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        arrays[name] = arr
        offset = -(-offset // _ALIGN) * _ALIGN
        header_fields[name] = [arr.dtype.str, list(arr.shape[1:]), offset, arr.nbytes, zlib.crc32(arr)]
        offset += arr.nbytes
    index = int(_SEG_RE.match(path.name).group(1))
    header = {
        "format": STORE_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "index": index,
        "records": n,
        "sources": names.tolist(),
        "seqs": seqs or {},
        "messages": messages or [],
        "fields": header_fields,
        "created": time.time(),
    }
    head = json.dumps(header).encode()
    base = -(-(len(MAGIC) + 8 + len(head)) // _ALIGN) * _ALIGN
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + len(head).to_bytes(8, "little") + head)
        for name, (_, _, off, _, _) in header_fields.items():
            f.seek(base + off)
            f.write(memoryview(arrays[name]).cast("B"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return Segment(path.name, index, n, header["sources"], header["seqs"], header["messages"])


def read_segment(path: Path, verify: bool = True, mmap: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, field arrays) of a segment; arrays are read-only memory maps unless `mmap` is False.
    Raises StorageError naming the file if it is truncated, corrupt or of another format."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            start = f.read(len(MAGIC) + 8)
            if len(start) < len(MAGIC) + 8 or not start.startswith(MAGIC):
                raise StorageError(f"segment {path} is not a robo_rl segment (bad magic)")
            head_len = int.from_bytes(start[len(MAGIC) :], "little")
            header = json.loads(f.read(head_len))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        if isinstance(e, StorageError):
            raise
        raise StorageError(f"segment {path} is unreadable ({type(e).__name__}: {e})") from None
    if header.get("format") != STORE_FORMAT or header.get("schema_version") != SCHEMA_VERSION:
        raise StorageError(
            f"segment {path} has format {header.get('format')}/schema {header.get('schema_version')}, "
            f"expected {STORE_FORMAT}/{SCHEMA_VERSION}"
        )
    base = -(-(len(MAGIC) + 8 + head_len) // _ALIGN) * _ALIGN
    n = header["records"]
    arrays = {}
    for name, (dtype, shape, off, nbytes, crc) in header["fields"].items():
        if base + off + nbytes > size:
            raise StorageError(f"segment {path} is truncated: field '{name}' ends past the end of the file")
        if nbytes:
            arr = np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=base + off, shape=(n, *shape))
        else:
            arr = np.zeros((n, *shape), np.dtype(dtype))
        if verify and zlib.crc32(arr) != crc:
            raise StorageError(f"segment {path} is corrupt: field '{name}' fails its checksum")
        arrays[name] = arr if mmap else np.array(arr)
    return header, arrays


class SegmentStore:
    """A folder of segments for one field layout. Not thread-safe except `write` from one writer thread."""

    def __init__(
        self,
        root: str | Path,
        fields: dict[str, tuple],
        create: bool = True,
        partition: str = "online",
        readonly: bool = False,
    ) -> None:
        self.root = Path(root)
        # a reader (`open`) changes nothing on disk: the store may be live, its writer mid-segment
        self.readonly = readonly
        self.partition = partition  # what the records are: online, demos (a new store records it in its header)
        self.fields = fields
        self.manifest = self.root / "manifest.jsonl"
        self.tasks: list[str] = []  # the instructions records' `task` indexes, from tasks.json
        self.segments: list[Segment] = []
        self.problems: list[str] = []  # what was skipped on open, one line each
        if not self.manifest.exists():
            if not create:
                raise StorageError(f"{self.root} is not a robo_rl replay store (no manifest.jsonl)")
            self.root.mkdir(parents=True, exist_ok=True)
            head = {
                "kind": "store",
                "format": STORE_FORMAT,
                "schema_version": SCHEMA_VERSION,
                "fields": fields_spec(fields),
                "partition": partition,
                "created": time.time(),
            }
            tmp = self.manifest.with_suffix(".tmp")
            tmp.write_text(json.dumps(head) + "\n")
            os.replace(tmp, self.manifest)
        self._scan()

    @classmethod
    def open(cls, root: str | Path) -> SegmentStore:
        """Open an existing store to read, with the field layout written in its manifest. Read-only: a run's store may
        be live (a retrain, a reviewer, an export beside the learner), so its writer's half-written `.tmp` segment is
        left alone and a whole segment not yet in the manifest is read without being listed there; the writer's own
        open (the constructor) does that recovery."""
        manifest = Path(root) / "manifest.jsonl"
        try:
            head = json.loads(manifest.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            raise StorageError(f"{root} is not a robo_rl replay store (missing or unreadable manifest.jsonl)") from None
        fields = {name: (tuple(shape), np.dtype(dtype)) for name, (dtype, shape) in head["fields"].items()}
        return cls(root, fields, create=False, readonly=True)

    def _scan(self) -> None:
        text = self.manifest.read_text()
        if not text.endswith("\n"):  # a kill tore the last line (or a live writer is mid-line): drop it
            text = text[: text.rfind("\n") + 1]  # its segment is adopted below if whole
            if not self.readonly:
                tmp = self.manifest.with_suffix(".tmp")
                tmp.write_text(text)
                os.replace(tmp, self.manifest)
        lines = text.splitlines()
        head = json.loads(lines[0])
        tasks_file = self.root / TASKS_FILE
        if tasks_file.exists():
            self.tasks = json.loads(tasks_file.read_text())
        self.partition = head.get("partition", "online")
        if head.get("fields") != fields_spec(self.fields):
            raise StorageError(
                f"replay store {self.root} holds records of another layout (cameras, state or action "
                "sizes differ from this config): use a new run folder"
            )
        listed: dict[str, Segment] = {}
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                listed[entry["name"]] = Segment(
                    entry["name"],
                    entry["index"],
                    entry["records"],
                    entry.get("sources", []),
                    entry.get("seqs", {}),
                    entry.get("messages", []),
                )
            except (ValueError, KeyError):
                continue  # a torn last line from a kill: the segment itself is adopted below if it is whole
        for tmp in [] if self.readonly else self.root.glob("*.tmp"):
            tmp.unlink()  # half-written by a killed writer; its records were never acknowledged
        on_disk = sorted((int(m.group(1)), p.name) for p in self.root.iterdir() if (m := _SEG_RE.match(p.name)))
        for index, name in on_disk:
            if name in listed:
                self.segments.append(listed[name])
                continue
            try:
                header, _ = read_segment(self.root / name, verify=True)
            except StorageError as e:
                self.problems.append(str(e))
                continue
            seg = Segment(name, index, header["records"], header["sources"], header["seqs"], header.get("messages", []))
            self.segments.append(seg)
            if not self.readonly:
                self._append_manifest(seg)
                log.info("adopted segment %s (written before a kill, not yet in the manifest)", name)
        for name in sorted(set(listed) - {s.name for s in self.segments}):
            self.problems.append(f"segment {self.root / name} is listed in the manifest but missing")

    def save_tasks(self, names: list[str]) -> None:
        """Write the task table (atomically, before any segment whose records index its new entries)."""
        tmp = self.root / (TASKS_FILE + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(list(names)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / TASKS_FILE)
        _fsync_dir(self.root)
        self.tasks = list(names)

    def _append_manifest(self, seg: Segment) -> None:
        entry = {
            "kind": "segment",
            "name": seg.name,
            "index": seg.index,
            "records": seg.records,
            "sources": seg.sources,
            "seqs": seg.seqs,
            "messages": seg.messages,
        }
        with open(self.manifest, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @property
    def num_records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def nbytes(self) -> int:
        return sum((self.root / s.name).stat().st_size for s in self.segments if (self.root / s.name).exists())

    def write(
        self, batch: dict[str, np.ndarray], sources: np.ndarray, seqs: dict | None = None, messages: list | None = None
    ) -> Segment:
        """Append one segment (synchronously); returns it once it is on disk and in the manifest."""
        if self.readonly:
            raise StorageError(f"{self.root} was opened to read (SegmentStore.open): it takes no segment")
        index = self.segments[-1].index + 1 if self.segments else 1
        seg = write_segment(self.root / f"seg_{index:06d}.rrs", batch, sources, seqs, messages)
        self._append_manifest(seg)
        self.segments.append(seg)
        return seg

    def read(self, seg: Segment, verify: bool = True, mmap: bool = True) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(step batch, per-record source labels) of one segment."""
        header, arrays = read_segment(self.root / seg.name, verify=verify, mmap=mmap)
        codes = arrays.pop(SOURCE_FIELD)
        return arrays, np.asarray(header["sources"], dtype=object)[codes] if len(codes) else np.empty(0, object)

    def iter_segments(self, verify: bool = True, mmap: bool = True):
        """Yield (segment, step batch, sources) in order; a corrupt one is reported in `problems` and skipped."""
        for seg in self.segments:
            try:
                batch, sources = self.read(seg, verify=verify, mmap=mmap)
            except StorageError as e:
                self.problems.append(str(e))
                log.error("%s: skipped", e)
                continue
            yield seg, batch, sources


class SegmentWriter:
    """Writes segments on a background thread, so the learner's loop never waits on the disk.

    `submit` hands over records; `completed()` returns the segments written since the last call (and
    re-raises, naming the problem, if a write failed: the records are still in memory and unacknowledged).
    """

    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self._todo: queue.Queue = queue.Queue()
        self._results: list = []  # written segments (or the error of a failed write), in order
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="segment-writer", daemon=True)
        self._thread.start()

    def submit(
        self, batch: dict[str, np.ndarray], sources: np.ndarray, seqs: dict, messages: list | None = None
    ) -> None:
        self._todo.put((batch, sources, seqs, messages))

    def _work(self) -> None:
        while True:
            item = self._todo.get()
            try:
                if item is None:
                    return
                try:
                    result = self.store.write(*item)
                except Exception as e:  # disk full, permissions: surfaced on the main thread
                    result = StorageError(f"writing a replay segment in {self.store.root} failed: {e}")
                with self._lock:
                    self._results.append(result)
            finally:
                self._todo.task_done()

    def completed(self, wait: bool = False) -> list[Segment]:
        """Segments written since the last call; with `wait`, first wait for everything submitted.
        (Interrupting the wait loses nothing: the results stay queued for the next call.)"""
        if wait:
            self._todo.join()
        with self._lock:
            out, self._results = self._results, []
        for item in out:
            if isinstance(item, Exception):
                raise item
        return out

    def close(self) -> list[Segment]:
        done = self.completed(wait=True)
        self._todo.put(None)
        self._thread.join(timeout=10)
        return done
