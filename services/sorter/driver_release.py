"""Small micro-batches released by the driver itself (no I/O here).

A Spark job costs 0.3-1 s of planning, code generation and scheduling here whatever its
size, and the Spark path of a batch (job.py) is two of them: at a steady load each change
then waits seconds for batches that carry a few thousand rows. When the batch and the
changes still pending are few (``sorter.driver_release_rows``), the job instead reads the
batch once into the driver (one Spark job, the Kafka read) and this module does the rest
in Python, with the same rules (rules.py) and the same output as the Spark path:

* :func:`parse_row` — one row of the changes topic as the columns ``job.parse`` gives it;
* :func:`release` — the rows of a release window, in (commit_ts, txn, seq) order,
  each complete transaction between ``begin`` and ``commit`` markers, each incomplete
  one's rows as dead letters;
* :func:`dead_letter` — a row to ``_crossfeed.dlq`` with the context headers.

Records are ``(topic, key, value, headers)``; the job produces them in list order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crossfeed import dlq
from crossfeed.services.sorter import rules
from crossfeed.services.sorter.rules import Window
from crossfeed.wire import headers, topics

Header = tuple[str, bytes | None]
Record = tuple[str, bytes | None, bytes | None, list[Header]]

# The job's regexes (job.TXN_RE & co.): Spark's rlike finds a match anywhere, these are
# anchored both ends, so search() behaves the same.
_TS = re.compile(r"^[0-9]{1,18}$")
_TXN = re.compile(r"^([^/:]+)/([0-9]{1,9})/([0-9]{1,9})$")
_SRC = re.compile(r"^([^/]*)/([^/]+)/([0-9]{1,9})/([0-9]{1,19})$")
_MARK_KEY = re.compile(r"^([^/]+)/([0-9]{1,9})$")


@dataclass(frozen=True, slots=True)
class ParsedRow:
    """A row of the changes topic with what the sorter decides on; the fields (and their
    order) are the columns of a pending segment (arrow_segments.SCHEMA)."""

    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp_ms: int
    kind: str  # data, mark or bad
    commit_ts: int | None
    part: str | None  # a resolved mark's source partition (topic/partition)
    txn_id: str | None
    seq: int | None
    count: int | None
    src_cluster: str
    src_topic: str
    src_partition: int
    src_offset: int
    error: str | None


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def parse_row(
    key: bytes | None,
    value: bytes | None,
    record_headers: Sequence[Header] | None,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int,
) -> ParsedRow:
    """What ``job.parse`` computes for the row, in Python (the unit tests hold the two
    to the same answers, and to rules.parse_*)."""
    hdrs = list(record_headers or [])
    first: dict[str, bytes | None] = {}
    for name, raw in hdrs:
        if name not in first:
            first[name] = raw
    h_type = _text(first.get(headers.TYPE))
    h_ts = _text(first.get(headers.COMMIT_TS))
    h_txn = _text(first.get(headers.TXN))
    h_src = _text(first.get(headers.SRC))
    commit_ts = int(h_ts) if h_ts is not None and _TS.search(h_ts) else None
    src = _SRC.search(h_src) if h_src is not None else None
    txn = _TXN.search(h_txn) if h_txn is not None else None
    txn_id: str | None = None
    seq = count = None
    if h_txn is None:
        seq = count = 1
        if src is not None:
            txn_id = ":".join(src.groups())
    elif txn is not None:
        txn_id, seq, count = txn[1], int(txn[2]), int(txn[3])
    key_text = _text(key)
    error: str | None = None
    if h_type == headers.TYPE_RESOLVED:
        if key_text is None or not _MARK_KEY.search(key_text):
            error = "resolved mark key is not topic/partition"
        elif commit_ts is None:
            error = f"resolved mark without a valid {headers.COMMIT_TS}"
    elif h_type is not None:
        error = f"unknown {headers.TYPE} {h_type}"
    elif commit_ts is None:
        error = f"no valid {headers.COMMIT_TS} header"
    elif txn_id is None:
        error = f"{headers.TXN} and {headers.SRC} unreadable"
    elif seq is not None and count is not None and (seq < 1 or seq > count):
        error = f"{headers.TXN} seq outside 1..count"
    if error is not None:
        kind = "bad"
    elif h_type == headers.TYPE_RESOLVED:
        kind = "mark"
    else:
        kind = "data"
    return ParsedRow(
        key,
        value,
        hdrs,
        timestamp_ms,
        kind,
        commit_ts,
        key_text if h_type == headers.TYPE_RESOLVED else None,
        txn_id,
        seq,
        count,
        src[1] if src else "",
        src[2] if src else topic,
        int(src[3]) if src else partition,
        int(src[4]) if src else offset,
        error,
    )


def _h(name: str, text: str) -> Header:
    return (name, text.encode())


def dead_letter(row: ParsedRow, feed: str, error_class: str, message: str) -> Record:
    """``row`` for ``_crossfeed.dlq``: its own headers, then the context (job._dead_letter)."""
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
        f"commit_ts {row.commit_ts} arrived after the feed's resolved_ts {window.low}",
    )


@dataclass
class Released:
    """What :func:`release` produced, and its counts (the Spark path observes the same)."""

    records: list[Record] = field(default_factory=list)
    events: int = 0
    txns: int = 0
    dead_letters: int = 0


def _sort_key(row: ParsedRow) -> tuple[int, str, int]:
    assert row.commit_ts is not None and row.txn_id is not None and row.seq is not None
    return rules.sort_key(row.commit_ts, row.txn_id, row.seq)


def split(counts: Mapping[int, int], window: Window, limit: int) -> list[Window] | None:
    """``window`` as consecutive windows that each release at most ``limit`` changes,
    given how many changes each commit_ts holds; cut only between two commit_ts, so no
    transaction (one commit_ts) is split. None when one commit_ts alone holds more than
    ``limit``: that release needs Spark's sort."""
    parts: list[Window] = []
    low, held, last = window.low, 0, window.low
    for ts in sorted(t for t in counts if window.releases(t)):
        n = counts[ts]
        if n > limit:
            return None
        if held + n > limit:
            parts.append(Window(low, last))
            low, held = last, 0
        held += n
        last = ts
    parts.append(Window(low, window.high))
    return parts


def release(
    rows: Iterable[ParsedRow], window: Window, feed: str, reached: int | None = None
) -> Released:
    """The data rows of ``window`` (any order; others are ignored) as `.sorted` records
    in (commit_ts, txn, seq) order; a transaction — (commit_ts, txn id) — that is not
    complete (rules.is_complete) goes to the DLQ, every row of it (its reason names
    ``reached``, the feed's resolved_ts, when ``window`` is a part of a bigger release)."""
    sorted_topic = topics.sorted_(feed)
    inside = sorted(
        (
            r
            for r in rows
            if r.kind == "data" and r.commit_ts is not None and window.releases(r.commit_ts)
        ),
        key=_sort_key,
    )
    out = Released()
    start = 0
    while start < len(inside):
        first = inside[start]
        end = start + 1
        while (
            end < len(inside)
            and inside[end].commit_ts == first.commit_ts
            and inside[end].txn_id == first.txn_id
        ):
            end += 1
        group = inside[start:end]
        start = end
        if _whole(group):
            out.records.append(_marker(sorted_topic, headers.TYPE_BEGIN, first))
            for r in group:
                stamped = [*r.headers, _h(headers.TIMESTAMP, str(r.timestamp_ms))]
                out.records.append((sorted_topic, r.key, r.value, stamped))
            out.records.append(_marker(sorted_topic, headers.TYPE_COMMIT, first))
            out.events += len(group)
            out.txns += 1
            continue
        message = (
            f"transaction {first.txn_id} has {len(group)} changes (seq/count not 1..count "
            "exactly once, or commit_ts differs) when the feed's resolved_ts reached "
            f"{window.high if reached is None else reached}"
        )
        for r in group:
            out.records.append(dead_letter(r, feed, "IncompleteTransaction", message))
            out.dead_letters += 1
    return out


def _whole(group: list[ParsedRow]) -> bool:
    """rules.is_complete for the rows of one (commit_ts, txn id), sorted by seq: seq
    1..count exactly once, one count."""
    count = group[0].count
    return (
        len(group) == count
        and all(r.count == count for r in group)
        and all(r.seq == i for i, r in enumerate(group, 1))
    )


def _marker(sorted_topic: str, what: str, row: ParsedRow) -> Record:
    return (
        sorted_topic,
        None,
        None,
        [
            _h(headers.TYPE, what),
            _h(headers.COMMIT_TS, str(row.commit_ts)),
            _h(headers.TXN, f"{row.txn_id}/0/{row.count}"),
        ],
    )
