"""Pending segments read and written by the driver (pyarrow), for batches it releases
itself (driver_release.py).

A segment is a directory of parquet files under the store's ``pending/`` with the columns
of ``job.parse`` (:data:`SCHEMA`, the fields of ``ParsedRow``): the Spark path writes them
with Spark and reads them with Spark, the driver path with pyarrow, and each reads what
the other wrote (a feed moves between the two paths with its load).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crossfeed.services.sorter.driver_release import ParsedRow, parse_row
from crossfeed.services.sorter.rules import Segment, Window
from crossfeed.services.sorter.store import Store

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS),
        ("timestamp_ms", pa.int64()),
        ("kind", pa.string()),
        ("commit_ts", pa.int64()),
        ("part", pa.string()),
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
assert SCHEMA.names == [f.name for f in dataclasses.fields(ParsedRow)]

FILE = "part-00000-driver.parquet"


def header_lists(column: Any) -> list[list[tuple[str, bytes | None]]]:
    """A headers column as one list of (key, value) per row. Converting the flat key and
    value arrays and cutting them by list lengths is ~10x cheaper than pyarrow's
    conversion of nested lists."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_pylist()
    keys, values = (a.to_pylist() for a in lists.flatten().flatten())
    out: list[list[tuple[str, bytes | None]]] = []
    at = 0
    for n in lengths:
        out.append(list(zip(keys[at : at + n], values[at : at + n], strict=True)))
        at += n
    return out


def parse_table(table: pa.Table) -> tuple[list[ParsedRow], pa.Table]:
    """Rows of the changes topic as Spark's Kafka source gives them (key, value, headers,
    topic, partition, offset, timestamp) -> the parsed rows, and the same as a table of
    :data:`SCHEMA` (what a segment holds)."""
    micros = pc.cast(table.column("timestamp"), pa.int64()).to_pylist()
    rows = [
        parse_row(key, value, hdrs, topic, partition, offset, us // 1000)
        for key, value, hdrs, topic, partition, offset, us in zip(
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            header_lists(table.column("headers")),
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            micros,
            strict=True,
        )
    ]
    same = {"key", "value", "headers"}  # taken as they are, not converted back
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in same
        else pa.array([getattr(r, f.name) for r in rows], type=f.type)
        for f in SCHEMA
    ]
    return rows, pa.table(columns, schema=SCHEMA)


def rows_of(table: pa.Table) -> list[ParsedRow]:
    columns = [
        header_lists(table.column(name)) if name == "headers" else table.column(name).to_pylist()
        for name in SCHEMA.names
    ]
    return [ParsedRow(*values) for values in zip(*columns, strict=True)]


@dataclass(frozen=True)
class Pending:
    """Data rows waiting for their release: as parsed rows (to release) and as the same
    rows in a table of :data:`SCHEMA` (to write as a segment), in the same order."""

    rows: list[ParsedRow]
    table: pa.Table

    def where(self, keep: list[bool]) -> Pending:
        return Pending(
            [r for r, k in zip(self.rows, keep, strict=True) if k],
            self.table.filter(pa.array(keep, type=pa.bool_())),
        )


def _files(store: Store, segment: Segment) -> list[Path]:
    path = Path(store.segment_path(segment.name))
    return sorted(p for p in path.glob("*.parquet") if not p.name.startswith((".", "_")))


def _inside(table: pa.Table, window: Window) -> Any:
    ts = table.column("commit_ts")
    return pc.and_(
        pc.equal(table.column("kind"), "data"),
        pc.and_(pc.greater(ts, window.low), pc.less_equal(ts, window.high)),
    )


def ts_counts(store: Store, segment: Segment, window: Window) -> Counter[int]:
    """How many of a segment's data rows ``window`` releases, per commit_ts (reads two
    columns)."""
    out: Counter[int] = Counter()
    for file in _files(store, segment):
        table = pq.read_table(file, columns=["kind", "commit_ts"])
        counted = pc.value_counts(table.filter(_inside(table, window)).column("commit_ts"))
        for entry in counted.to_pylist():
            out[entry["values"]] += entry["counts"]
    return out


def read(store: Store, segments: Iterable[Segment], window: Window) -> pa.Table:
    """The data rows of ``segments`` that ``window`` releases."""
    tables = [SCHEMA.empty_table()]
    for segment in segments:
        for file in _files(store, segment):
            table = pq.read_table(file, columns=SCHEMA.names)
            tables.append(table.filter(_inside(table, window)).cast(SCHEMA))
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
