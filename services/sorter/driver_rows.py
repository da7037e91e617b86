"""The driver's release engine as pure column functions: a batch's rows parsed, ordered,
cut into transactions and framed as records, with no I/O (the engine that reads and
writes segments and produces the records is :mod:`driver_release`).

A Spark job costs 0.3-1 s of planning, code generation and scheduling here whatever its
size, and Spark's release of a batch (spark_release.py) is two of them: at a steady load
each change then waits seconds for batches that carry a few thousand rows. So the job reads
a batch once into the driver as an Arrow table (one Spark job, the Kafka read) and the
driver does the rest with the same rules (the grammar of crossfeed/wire/grammar.py, rule D
of rules.py) and the same output as Spark's release:

* :func:`parse` — the rows of the changes topic (:data:`RAW_COLUMNS`) as the columns
  ``spark_release.parse_rows`` gives them (:data:`SCHEMA`, also the columns of a pending
  segment); :func:`parse_batch` — with the batch's marks;
* :func:`letters_and_pending` — a batch's unreadable and late rows as dead letters, the
  rest as rows pending;
* :func:`window_records` — the data rows of a release window in (commit_ts, txn, seq)
  order, each record of a complete transaction with its place in it
  (``crossfeed-order``: the inline form of docs/ordered-feeds.md §3, no ``begin`` or
  ``commit`` records), each incomplete one's rows as dead letters;
* :func:`dead_letter` / :func:`late_letter` — a row to ``_crossfeed.dlq`` with its context.

All work on whole columns (pyarrow compute, numpy): a row costs ~1 µs to parse and order
here, against ~30 µs when every row was a Python object, which at a steady load left less
of the machine's two cores to the pullers, brokers and sink around the sorter. Only what
goes out is made into Python objects: the records (``(topic, key, value, headers)``, to be
produced in list order) and the few rows that become dead letters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crossfeed import dlq
from crossfeed.services.sorter import rules
from crossfeed.services.sorter.rules import Window
from crossfeed.services.sorter.segments import SCHEMA, inside
from crossfeed.wire import grammar, headers, topics

Header = tuple[str, bytes | None]
Record = tuple[str, bytes | None, bytes | None, list[Header]]

# RE2's forms of the grammar (crossfeed/wire/grammar.py), its fields as named groups; a
# 19-digit commit_ts or offset above MAX_LONG is none (as in Spark's release).
_TS = grammar.COMMIT_TS.re2()
_TXN = grammar.TXN.re2()
_PROV = grammar.PROV.re2()
_SRC = grammar.SRC.re2()  # the legacy form of a change copied by an older puller
_MARK_KEY = grammar.MARK_KEY.re2()
_INT64_MAX = str(grammar.MAX_LONG)


@dataclass(frozen=True, slots=True)
class ParsedRow:
    """One row of :data:`SCHEMA` as Python values (for a dead letter)."""

    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp_ms: int
    kind: str
    commit_ts: int | None
    part: str | None
    txn_id: str | None
    seq: int | None
    count: int | None
    src_cluster: str
    src_topic: str
    src_partition: int
    src_offset: int
    error: str | None


assert SCHEMA.names == [f.name for f in dataclasses.fields(ParsedRow)]


def header_lists(column: Any) -> list[list[Header]]:
    """A headers column as one list of (key, value) per row. Converting the flat key and
    value arrays and cutting them by list lengths is ~10x cheaper than pyarrow's
    conversion of nested lists."""
    lists = _array(column)
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_pylist()
    keys, values = (a.to_pylist() for a in lists.flatten().flatten())
    out: list[list[Header]] = []
    at = 0
    for n in lengths:
        out.append(list(zip(keys[at : at + n], values[at : at + n], strict=True)))
        at += n
    return out


def rows_of(table: pa.Table) -> list[ParsedRow]:
    columns = [
        header_lists(table.column(name)) if name == "headers" else table.column(name).to_pylist()
        for name in SCHEMA.names
    ]
    return [ParsedRow(*values) for values in zip(*columns, strict=True)]


# -- parse --------------------------------------------------------------------------------


def _array(column: Any) -> Any:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _text(values: Any) -> Any:
    """Binary values as strings; bytes that are not UTF-8 replaced, as Python's
    ``decode(errors="replace")`` does (the vectorized cast refuses them)."""
    try:
        return pc.cast(values, pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()],
            pa.string(),
        )


def _first_headers(column: Any, names: tuple[str, ...]) -> list[Any]:
    """Per name, the value of each row's first header of that name as a string (null
    where the row has none)."""
    lists = _array(column)
    n = len(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    keys, values = lists.flatten().flatten()
    out = []
    for name in names:
        hits = np.flatnonzero(pc.fill_null(pc.equal(keys, name), False).to_numpy(False))
        rows, first = np.unique(parents[hits], return_index=True)  # parents ascend
        at = np.full(n, -1, dtype=np.int64)
        at[rows] = hits[first]
        out.append(_text(values.take(pa.array(at, mask=at < 0))))
    return out


def _when(condition: Any, value: Any, otherwise: Any) -> Any:
    return pc.if_else(pc.fill_null(condition, False), value, otherwise)


def _null(type_: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, type_)


def _matches(text: Any, pattern: str) -> Any:
    return pc.fill_null(pc.match_substring_regex(text, pattern), False)


def _pieces(text: Any, pattern: str) -> list[Any]:
    """The named groups of ``pattern`` in ``text``, null where it does not match."""
    return list(pc.extract_regex(text, pattern).flatten())


def _fits_long(digits: Any) -> Any:
    """grammar.fits_long, a column at a time."""
    short = pc.less(pc.utf8_length(digits), grammar.LONG_DIGITS)
    return pc.or_(short, pc.less_equal(digits, _INT64_MAX))


def parse(table: pa.Table) -> pa.Table:
    """Rows of the changes topic as Spark's Kafka source gives them (key, value, headers,
    topic, partition, offset, timestamp) -> the same rows as ``spark_release.parse_rows``'s columns
    (:data:`SCHEMA`); tests/integration/test_sorter_parse.py holds the two to the same
    answers on crafted rows."""
    h_type, h_ts, h_txn, h_prov, h_src = _first_headers(
        table.column("headers"),
        (headers.TYPE, headers.COMMIT_TS, headers.TXN, headers.PROV, headers.SRC),
    )
    (ts_digits,) = _pieces(h_ts, _TS)
    commit_ts = pc.cast(_when(_fits_long(ts_digits), ts_digits, _null(pa.string())), pa.int64())
    # The source record: crossfeed-prov's last hop and the three fields after it, else a
    # legacy crossfeed-src's four (a row matches all of a pattern's groups or none).
    _, *prov, _ = _pieces(h_prov, _PROV)  # without the earlier hops and the origin topic
    legacy = _pieces(h_src, _SRC)
    cluster, src_topic, src_part, src_offset = (
        pc.coalesce(new, old) for new, old in zip(prov, legacy, strict=True)
    )
    src_ok = pc.is_valid(cluster)
    own_txn = pc.binary_join_element_wise(cluster, src_topic, src_part, src_offset, ":")
    src_offset = _when(_fits_long(src_offset), src_offset, _null(pa.string()))
    txn_id, seq, count = _pieces(h_txn, _TXN)
    no_txn = pc.is_null(h_txn)
    one = pa.scalar(1, pa.int32())
    txn_id = _when(no_txn, _when(src_ok, own_txn, _null(pa.string())), txn_id)
    seq = _when(no_txn, one, pc.cast(seq, pa.int32()))
    count = _when(no_txn, one, pc.cast(count, pa.int32()))

    key_text = _text(_array(table.column("key")))
    resolved = pc.fill_null(pc.equal(h_type, headers.TYPE_RESOLVED), False)
    error = _null(pa.string())  # the rules from the last to the first: the first wins
    for condition, message in [
        (pc.or_(pc.less(seq, 1), pc.greater(seq, count)), f"{headers.TXN} seq outside 1..count"),
        (pc.is_null(txn_id), f"{headers.TXN} and {headers.PROV} unreadable"),
        (pc.is_null(commit_ts), f"no valid {headers.COMMIT_TS} header"),
        (pc.is_valid(h_type), pc.binary_join_element_wise(f"unknown {headers.TYPE} ", h_type, "")),
    ]:
        error = _when(condition, message, error)
    mark_error = _when(
        pc.invert(_matches(key_text, _MARK_KEY)),
        "resolved mark key is not topic/partition",
        _when(
            pc.is_null(commit_ts),
            f"resolved mark without a valid {headers.COMMIT_TS}",
            _null(pa.string()),
        ),
    )
    error = _when(resolved, mark_error, error)
    kind = _when(pc.is_valid(error), "bad", _when(resolved, "mark", "data"))
    micros = pc.cast(table.column("timestamp"), pa.int64()).to_numpy()
    columns = {
        "key": table.column("key"),
        "value": table.column("value"),
        "headers": table.column("headers"),
        "timestamp_ms": pa.array(np.floor_divide(micros, 1000)),
        "kind": kind,
        "commit_ts": commit_ts,
        "part": _when(resolved, key_text, _null(pa.string())),
        "txn_id": txn_id,
        "seq": seq,
        "count": count,
        "src_cluster": pc.coalesce(cluster, ""),
        "src_topic": pc.coalesce(src_topic, _array(table.column("topic"))),
        "src_partition": pc.coalesce(
            pc.cast(src_part, pa.int32()), pc.cast(table.column("partition"), pa.int32())
        ),
        "src_offset": pc.coalesce(pc.cast(src_offset, pa.int64()), _array(table.column("offset"))),
        "error": error,
    }
    return pa.table([pc.cast(columns[f.name], f.type) for f in SCHEMA], schema=SCHEMA)


# -- release --------------------------------------------------------------------------------


def _h(name: str, text: str) -> Header:
    return (name, text.encode())


def dead_letter(row: ParsedRow, feed: str, error_class: str, message: str) -> Record:
    """``row`` for ``_crossfeed.dlq``: its own headers, then the context (as
    spark_release's _dead_letter)."""
    context = [
        _h(dlq.FEED, feed),
        _h(dlq.CLUSTER, row.src_cluster),
        _h(dlq.TOPIC, row.src_topic),
        _h(dlq.PARTITION, str(row.src_partition)),
        _h(dlq.OFFSET, str(row.src_offset)),
        _h(dlq.STAGE, "sorter"),
        _h(dlq.ERROR_CLASS, error_class),
        _h(dlq.ERROR_MESSAGE, message),
    ]
    return (topics.DLQ, row.key, row.value, [*row.headers, *context])


def late_letter(row: ParsedRow, feed: str, window: Window) -> Record:
    return dead_letter(
        row,
        feed,
        "LateChange",
        f"commit_ts {row.commit_ts} arrived after the feed's resolved_ts {window.prev_resolved_ts}",
    )


@dataclass
class WindowRecords:
    """What :func:`window_records` made, and its counts (Spark's release observes the
    same)."""

    records: list[Record] = field(default_factory=list)
    events: int = 0
    txns: int = 0
    dead_letters: int = 0


def _groups(ordered: pa.Table) -> Iterator[tuple[int, int, bool]]:
    """(start, end, whole) of each transaction — (commit_ts, txn id) — of rows sorted by
    (commit_ts, txn, seq); whole when its rows are seq 1..count exactly once with one
    count (rule D of rules.py; one commit_ts by construction)."""
    n = ordered.num_rows
    if n == 0:
        return
    ts = ordered.column("commit_ts").to_numpy()
    txn = _array(ordered.column("txn_id"))
    new = np.ones(n, dtype=bool)
    if n > 1:
        same_txn = pc.equal(txn.slice(1), txn.slice(0, n - 1)).to_numpy(False)
        new[1:] = (ts[1:] != ts[:-1]) | ~same_txn
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    sizes = np.diff(np.append(starts, n))
    seq = ordered.column("seq").to_numpy()
    count = ordered.column("count").to_numpy()
    in_place = (seq == np.arange(n) - starts[group] + 1) & (count == sizes[group])
    whole = np.logical_and.reduceat(in_place, starts)
    yield from zip(starts.tolist(), (starts + sizes).tolist(), whole.tolist(), strict=True)


def window_records(
    table: pa.Table, window: Window, feed: str, reached: int | None = None
) -> WindowRecords:
    """The data rows of ``window`` in ``table`` (:data:`SCHEMA`, any order; other rows are
    ignored) as `.sorted` records in (commit_ts, txn, seq) order; a transaction —
    (commit_ts, txn id) — that is not complete goes to the DLQ, every row of it (its
    reason names ``reached``, the feed's resolved_ts, when ``window`` is a part of a
    bigger release)."""
    sorted_topic = topics.sorted_(feed)
    rows = table.filter(inside(table, window))
    # Arrow compares strings as UTF-8 bytes, as Spark does: the same txn order either way.
    rows = rows.take(
        pc.sort_indices(
            rows,
            sort_keys=[("commit_ts", "ascending"), ("txn_id", "ascending"), ("seq", "ascending")],
        )
    )
    keys = rows.column("key").to_pylist()
    values = rows.column("value").to_pylist()
    hdrs = header_lists(rows.column("headers"))
    stamps = pc.cast(pc.cast(rows.column("timestamp_ms"), pa.string()), pa.binary()).to_pylist()
    commit_ts = rows.column("commit_ts").to_pylist()
    txn_ids = rows.column("txn_id").to_pylist()
    counts = rows.column("count").to_pylist()
    out = WindowRecords()
    append = out.records.append
    for start, end, whole in _groups(rows):
        if not whole:
            message = (
                f"transaction {txn_ids[start]} has {end - start} changes (seq/count not "
                "1..count exactly once, or commit_ts differs) when the feed's resolved_ts "
                f"reached {window.resolved_ts if reached is None else reached}"
            )
            for row in rows_of(rows.slice(start, end - start)):
                append(dead_letter(row, feed, "IncompleteTransaction", message))
            out.dead_letters += end - start
            continue
        # crossfeed-order: <seq>/<count>/<commit_ts>/<txn id> (grammar.ORDER); whole, so
        # seq runs 1..count from start
        place = f"/{counts[start]}/{commit_ts[start]}/{txn_ids[start]}".encode()
        for i in range(start, end):
            hdrs[i].append((headers.TIMESTAMP, stamps[i]))
            hdrs[i].append((headers.ORDER, b"%d%s" % (i - start + 1, place)))
            append((sorted_topic, keys[i], values[i], hdrs[i]))
        out.events += end - start
        out.txns += 1
    return out


# -- a batch --------------------------------------------------------------------------------

# What the driver reads of a batch (Spark's Kafka source columns).
RAW_COLUMNS = ("key", "value", "headers", "topic", "partition", "offset", "timestamp")


@dataclass(frozen=True)
class Batch:
    """A micro-batch parsed by the driver: its rows (:data:`SCHEMA`), and its marks."""

    table: pa.Table
    marks: dict[str, int]  # the newest resolved_ts per source partition among its marks
    mark_rows: int

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)


def parse_batch(raw: pa.Table) -> Batch:
    """A batch's rows (:data:`RAW_COLUMNS`) parsed, and its marks."""
    parsed = parse(raw)
    marks = parsed.filter(pc.equal(parsed.column("kind"), "mark"))
    marked = zip(
        marks.column("part").to_pylist(), marks.column("commit_ts").to_pylist(), strict=True
    )
    return Batch(parsed, rules.max_marks(marked), marks.num_rows)


def late(table: pa.Table, window: Window) -> Any:
    """A mask of the data rows arriving at or below R_prev (rules.Window.is_late)."""
    return pc.fill_null(
        pc.and_(
            pc.equal(table.column("kind"), "data"),
            pc.less_equal(table.column("commit_ts"), window.prev_resolved_ts),
        ),
        False,
    )


def letters_and_pending(batch: Batch, window: Window, feed: str) -> tuple[list[Record], pa.Table]:
    """The batch's rows as they arrive: unreadable ones and late ones (at or below R_prev)
    as dead letters, and the data rows that wait for their release (any commit_ts above
    R_prev: those of ``window`` too)."""
    table = batch.table
    kind = table.column("kind")
    too_late = late(table, window)
    letters = [
        late_letter(r, feed, window)
        if r.kind == "data"
        else dead_letter(r, feed, "UnreadableChange", r.error or "")
        for r in rows_of(table.filter(pc.or_(pc.equal(kind, "bad"), too_late)))
    ]
    return letters, table.filter(pc.and_(pc.equal(kind, "data"), pc.invert(too_late)))
