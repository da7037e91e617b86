"""Pending segments read and written by the driver (pyarrow), for batches it releases
itself (driver_release.py).

A segment is a directory of parquet files under the store's ``pending/`` with the columns
of ``job.parse`` (:data:`driver_release.SCHEMA`): the Spark path writes them with Spark and
reads them with Spark, the driver path with pyarrow, and each reads what the other wrote
(a feed moves between the two paths with its load).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crossfeed.services.sorter import driver_release
from crossfeed.services.sorter.driver_release import SCHEMA, inside
from crossfeed.services.sorter.rules import Segment, Window
from crossfeed.services.sorter.store import Store

FILE = "part-00000-driver.parquet"


def _files(store: Store, segment: Segment) -> list[Path]:
    path = Path(store.segment_path(segment.name))
    return sorted(p for p in path.glob("*.parquet") if not p.name.startswith((".", "_")))


def ts_counts(store: Store, segment: Segment, window: Window) -> Counter[int]:
    """How many of a segment's data rows ``window`` releases, per commit_ts (reads two
    columns)."""
    out: Counter[int] = Counter()
    for file in _files(store, segment):
        out.update(
            driver_release.ts_counts(pq.read_table(file, columns=["kind", "commit_ts"]), window)
        )
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
