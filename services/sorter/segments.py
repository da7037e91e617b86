"""The sorter's files and its pending segments.

Everything lives under the feed's checkpoint directory::

    <checkpoint_dir>/<feed>/spark/       Structured Streaming's offsets and commits
    <checkpoint_dir>/<feed>/state/N.json driver state after batch N (rules.DriverState)
    <checkpoint_dir>/<feed>/pending/     parquet segments of rows not yet released
    <checkpoint_dir>/<feed>/lock         held by the running sorter (one per feed)

A state file is written to a temporary name, fsynced and renamed over, so a kill -9 leaves
either the old or the new file, never half of one.

A segment is a directory of parquet files under ``pending/`` with the columns of
:data:`SCHEMA` (what spark_release.parse_rows and driver_rows.parse give): Spark's
release writes and reads them with Spark, the driver's with pyarrow (the functions
below), and each reads what the other wrote (a feed moves between them with its load).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crossfeed.services.sorter.rules import DriverState, Segment, Window

KEEP_STATES = 5


class FeedLocked(RuntimeError):
    """Another sorter holds the feed's checkpoint directory."""


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.spark_dir = root / "spark"
        self.state_dir = root / "state"
        self.pending_dir = root / "pending"
        self._lock: IO[str] | None = None

    def open(self) -> Store:
        for d in (self.state_dir, self.pending_dir):
            d.mkdir(parents=True, exist_ok=True)
        lock = open(self.root / "lock", "a+")  # noqa: SIM115 - held for the process' life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise FeedLocked(
                f"another sorter is running with {self.root} (one sorter per feed; "
                "scale it with Spark executors)"
            ) from None
        self._lock = lock
        return self

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- driver state ---------------------------------------------------------------------

    def _batches(self) -> list[int]:
        out = []
        for path in self.state_dir.glob("*.json"):
            with contextlib.suppress(ValueError):
                out.append(int(path.stem))
        return sorted(out)

    def load_before(self, batch_id: int) -> DriverState:
        """The state saved by the newest batch before ``batch_id`` (empty if none)."""
        for bid in reversed(self._batches()):
            if bid < batch_id:
                data = json.loads((self.state_dir / f"{bid}.json").read_text())
                return DriverState.from_dict(data)
        return DriverState()

    def latest(self) -> DriverState:
        return self.load_before(2**62)

    def save(self, state: DriverState) -> None:
        path = self.state_dir / f"{state.batch_id}.json"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump(state.as_dict(), out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        for bid in self._batches()[:-KEEP_STATES]:
            with contextlib.suppress(OSError):
                (self.state_dir / f"{bid}.json").unlink()

    # -- segments -------------------------------------------------------------------------

    def segment_path(self, name: str) -> str:
        return str(self.pending_dir / name)

    def delete_segments(self, names: list[str]) -> None:
        for name in names:
            shutil.rmtree(self.pending_dir / name, ignore_errors=True)


# -- pending segments (pyarrow) --------------------------------------------------------

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS),
        ("timestamp_ms", pa.int64()),
        ("kind", pa.string()),  # data, mark or bad
        ("commit_ts", pa.int64()),
        ("part", pa.string()),  # a resolved mark's source partition (topic/partition)
        ("txn_id", pa.string()),
        ("seq", pa.int32()),
        ("count", pa.int32()),
        ("src_cluster", pa.string()),
        ("src_topic", pa.string()),
        ("src_partition", pa.int32()),
        ("src_offset", pa.int64()),
        ("error", pa.string()),
    ]
)


def inside(table: pa.Table, window: Window) -> Any:
    """A mask of the data rows of ``table`` that ``window`` releases."""
    ts = table.column("commit_ts")
    return pc.fill_null(
        pc.and_(
            pc.equal(table.column("kind"), "data"),
            pc.and_(pc.greater(ts, window.prev_resolved_ts), pc.less_equal(ts, window.resolved_ts)),
        ),
        False,
    )


def ts_counts(table: pa.Table, window: Window) -> dict[int, int]:
    """How many data rows of ``table`` ``window`` releases, per commit_ts."""
    counted = pc.value_counts(table.filter(inside(table, window)).column("commit_ts"))
    return {e["values"]: e["counts"] for e in counted.to_pylist()}


FILE = "part-00000-driver.parquet"


def batch_segment(batch_id: int) -> str:
    """The name of the segment that keeps batch ``batch_id``'s rows (either engine's; a
    replay of the batch writes it again)."""
    return f"seg-{batch_id:012d}"


def _files(store: Store, segment: Segment) -> list[Path]:
    path = Path(store.segment_path(segment.name))
    return sorted(p for p in path.glob("*.parquet") if not p.name.startswith((".", "_")))


def file_ts_counts(store: Store, segment: Segment, window: Window) -> Counter[int]:
    """How many of a segment's data rows ``window`` releases, per commit_ts (reads two
    columns)."""
    out: Counter[int] = Counter()
    for file in _files(store, segment):
        out.update(ts_counts(pq.read_table(file, columns=["kind", "commit_ts"]), window))
    return out


def read(store: Store, segments: Iterable[Segment], window: Window) -> pa.Table:
    """The data rows of ``segments`` that ``window`` releases."""
    tables = [SCHEMA.empty_table()]
    for segment in segments:
        for file in _files(store, segment):
            table = pq.read_table(file, columns=SCHEMA.names)
            tables.append(table.filter(inside(table, window)).cast(SCHEMA))
    return pa.concat_tables(tables)


def write(store: Store, name: str, table: pa.Table) -> Segment:
    """``table`` (data rows of :data:`SCHEMA`) as segment ``name``, replacing whatever a
    replayed batch left there; the file appears whole (written under a hidden name, then
    renamed)."""
    path = Path(store.segment_path(name))
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    tmp = path / f".{FILE}"
    pq.write_table(table, tmp, use_dictionary=False)
    os.replace(tmp, path / FILE)
    return Segment(name, int(pc.max(table.column("commit_ts")).as_py()), table.num_rows)
