"""The driver path of the sorter (services/sorter/driver_release.py): rows parsed as the
rules say (column at a time, held to a row-at-a-time reading of the same rules here), released
in (commit_ts, txn, seq) order between begin/commit markers, incomplete transactions and bad
or late rows to the DLQ with their context. Spark's parse and this one are held to the same
columns by tests/integration/test_sorter_parse.py."""

from __future__ import annotations

import itertools
import random
import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed import dlq
from crossfeed.services.sorter import rules
from crossfeed.services.sorter.driver_release import (
    ParsedRow,
    dead_letter,
    late_letter,
    parse,
    release,
    rows_of,
    split,
)
from crossfeed.services.sorter.rules import Window
from crossfeed.services.sorter.segments import HEADERS
from crossfeed.wire import grammar
from crossfeed.wire import headers as H

pytestmark = pytest.mark.unit

FEED = "f"
SORTED = "_crossfeed.f.sorted"

Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], str, int, int, int]


def raw_table(rows: list[Raw]) -> pa.Table:
    """Rows as Spark's Kafka source gives them to the driver (timestamp in ms here)."""
    return pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.binary()),
            "value": pa.array([r[1] for r in rows], pa.binary()),
            "headers": pa.array([[{"key": k, "value": v} for k, v in r[2]] for r in rows], HEADERS),
            "topic": pa.array([r[3] for r in rows], pa.string()),
            "partition": pa.array([r[4] for r in rows], pa.int32()),
            "offset": pa.array([r[5] for r in rows], pa.int64()),
            "timestamp": pa.array([r[6] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )


def parse_one(*raw: object) -> ParsedRow:
    (row,) = rows_of(parse(raw_table([raw])))  # type: ignore[list-item]
    return row


# The rules of spark_release.parse_rows read one row at a time: the reference the
# vectorized parse is held to.
TS, TXN = re.compile(grammar.COMMIT_TS.python()), re.compile(grammar.TXN.python())
SRC, MARK_KEY = re.compile(grammar.SRC.python()), re.compile(grammar.MARK_KEY.python())


def reference(key, value, hdrs, topic, partition, offset, ms) -> ParsedRow:
    first: dict[str, bytes | None] = {}
    for name, raw in hdrs:
        first.setdefault(name, raw)

    def text(v: bytes | None) -> str | None:
        return None if v is None else v.decode("utf-8", "replace")

    h_type, h_ts = text(first.get(H.TYPE)), text(first.get(H.COMMIT_TS))
    h_txn, h_src = text(first.get(H.TXN)), text(first.get(H.SRC))
    commit_ts = int(h_ts) if h_ts and TS.fullmatch(h_ts) and grammar.fits_long(h_ts) else None
    src = SRC.fullmatch(h_src) if h_src is not None else None
    txn = TXN.fullmatch(h_txn) if h_txn is not None else None
    txn_id, seq, count = None, None, None
    if h_txn is None:
        seq = count = 1
        txn_id = ":".join(src.groups()) if src else None
    elif txn is not None:
        txn_id, seq, count = txn[1], int(txn[2]), int(txn[3])
    key_text = text(key)
    error = None
    if h_type == H.TYPE_RESOLVED:
        if key_text is None or not MARK_KEY.fullmatch(key_text):
            error = "resolved mark key is not topic/partition"
        elif commit_ts is None:
            error = f"resolved mark without a valid {H.COMMIT_TS}"
    elif h_type is not None:
        error = f"unknown {H.TYPE} {h_type}"
    elif commit_ts is None:
        error = f"no valid {H.COMMIT_TS} header"
    elif txn_id is None:
        error = f"{H.TXN} and {H.SRC} unreadable"
    elif seq is not None and count is not None and not 1 <= seq <= count:
        error = f"{H.TXN} seq outside 1..count"
    kind = "bad" if error else "mark" if h_type == H.TYPE_RESOLVED else "data"
    src_offset = int(src[4]) if src else offset
    return ParsedRow(
        key,
        value,
        list(hdrs),
        ms,
        kind,
        commit_ts,
        key_text if h_type == H.TYPE_RESOLVED else None,
        txn_id,
        seq,
        count,
        src[1] if src else "",
        src[2] if src else topic,
        int(src[3]) if src else partition,
        src_offset if src_offset < 2**63 else offset,  # Spark's cast: no long, so null
        error,
    )


def change(ts: int, txn: str, seq: int, count: int, value: bytes | None = None) -> pa.Table:
    """One data row of the changes topic, parsed (a table of driver_release.SCHEMA)."""
    hdrs = [
        (H.COMMIT_TS, str(ts).encode()),
        (H.TXN, f"{txn}/{seq}/{count}".encode()),
        (H.SRC, b"C1/orders/3/77"),
    ]
    raw = (b"k", value or f"{txn}-{seq}".encode(), hdrs, "_crossfeed.f.changes", 1, 9, 1234)
    return parse(raw_table([raw]))


def together(rows: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(rows) if rows else parse(raw_table([]))


def kinds(records: list) -> list[str]:
    out = []
    for topic, _key, value, hdrs in records:
        if topic != SORTED:
            out.append("dlq")
            continue
        kind = dict(hdrs).get(H.TYPE)
        out.append(kind.decode() if kind else (value or b"").decode())
    return out


def test_a_change_parses_to_what_the_rules_say():
    (row,) = rows_of(change(17, "tx", 2, 3))
    assert (row.kind, row.commit_ts, row.txn_id, row.seq, row.count) == ("data", 17, "tx", 2, 3)
    assert (row.src_cluster, row.src_topic, row.src_partition, row.src_offset) == (
        "C1",
        "orders",
        3,
        77,
    )
    assert row.timestamp_ms == 1234 and row.error is None


@pytest.mark.parametrize(
    ("hdrs", "key", "kind", "error"),
    [
        ([(H.TYPE, b"resolved"), (H.COMMIT_TS, b"20")], b"orders/4", "mark", None),
        ([(H.TYPE, b"resolved"), (H.COMMIT_TS, b"20")], b"orders", "bad", "not topic/partition"),
        ([(H.TYPE, b"resolved"), (H.COMMIT_TS, b"20")], None, "bad", "not topic/partition"),
        ([(H.TYPE, b"resolved")], b"orders/4", "bad", "without a valid"),
        ([(H.TYPE, b"begin"), (H.COMMIT_TS, b"5")], b"k", "bad", "unknown crossfeed-type"),
        ([(H.TXN, b"t/1/1")], b"k", "bad", "no valid crossfeed-commit-ts"),
        ([(H.COMMIT_TS, b"x"), (H.TXN, b"t/1/1")], b"k", "bad", "no valid"),
        ([(H.COMMIT_TS, b"5")], b"k", "bad", "unreadable"),
        ([(H.COMMIT_TS, b"5"), (H.TXN, b"t/4/3")], b"k", "bad", "seq outside 1..count"),
        ([(H.COMMIT_TS, b"5"), (H.TXN, b"a:b/1/1")], b"k", "bad", "unreadable"),
    ],
)
def test_marks_and_bad_rows(hdrs, key, kind, error):
    row = parse_one(key, b"v", hdrs, "_crossfeed.f.changes", 2, 7, 0)
    assert row.kind == kind
    assert (row.error is None) if error is None else (error in (row.error or ""))
    if kind == "mark":
        assert row.part == "orders/4" and row.commit_ts == 20
    # a dead letter names the staging record when crossfeed-src is absent
    assert (row.src_topic, row.src_partition, row.src_offset) == ("_crossfeed.f.changes", 2, 7)


def test_a_change_without_txn_is_a_transaction_of_its_own():
    row = parse_one(None, b"v", [(H.COMMIT_TS, b"8"), (H.SRC, b"/orders/4/100")], "t", 0, 0, 0)
    assert (row.kind, row.txn_id, row.seq, row.count) == ("data", ":orders:4:100", 1, 1)


def test_the_first_header_of_a_name_counts():
    hdrs = [(H.COMMIT_TS, b"12"), (H.TXN, b"t/1/2"), (H.COMMIT_TS, b"99"), (H.TXN, b"u/1/1")]
    row = parse_one(b"k", b"v", hdrs, "t", 0, 0, 0)
    assert (row.commit_ts, row.txn_id, row.seq, row.count) == (12, "t", 1, 2)


@pytest.mark.parametrize(
    "hdrs",
    [
        [(H.COMMIT_TS, b"12\n"), (H.TXN, b"t/1/2")],
        [(H.COMMIT_TS, b"12"), (H.TXN, b"t/1/2\n")],
        [(H.COMMIT_TS, b"12"), (H.SRC, b"C/t/1/2\n")],
    ],
)
def test_a_value_ending_in_a_newline_is_not_well_formed(hdrs):
    assert parse_one(b"k", b"v", hdrs, "t", 0, 0, 0).kind == "bad"


def test_bytes_that_are_not_utf8_are_replaced_not_refused():
    row = parse_one(b"k", b"v", [(H.TYPE, b"\xff"), (H.COMMIT_TS, b"5")], "t", 0, 0, 0)
    assert row.kind == "bad" and row.error == f"unknown {H.TYPE} \ufffd"


def test_an_offset_beyond_a_long_falls_back_to_the_staging_offset():
    hdrs = [(H.COMMIT_TS, b"5"), (H.SRC, b"C/t/1/9223372036854775808")]
    row = parse_one(b"k", b"v", hdrs, "t", 0, 42, 0)
    assert (row.src_offset, row.txn_id, row.kind) == (42, "C:t:1:9223372036854775808", "data")


_header_values = {
    H.TYPE: [b"resolved", b"begin", b"\xff"],
    H.COMMIT_TS: [b"12", b"12\n", b"x", b"1234567890123456789", b"-1", b"", b"007"],
    H.TXN: [b"t/1/2", b"t/3/2", b"t/0/1", b"a:b/1/1", b"t/1/2\n", b"t\n/1/1", b"/1/1", b"t/1"],
    H.SRC: [b"C/t/1/2", b"/t/1/2", b"C/t/x/2", b"C/t/1/9223372036854775808", b"C/t/1/2\n"],
    "other": [b"z"],
}
_headers = st.lists(
    st.sampled_from(sorted(_header_values)).flatmap(
        lambda name: st.tuples(
            st.just(name), st.none() | st.sampled_from(_header_values[name]) | st.binary(max_size=6)
        )
    ),
    max_size=6,
)
_raw = st.tuples(
    st.none()
    | st.sampled_from([b"orders/4", b"orders", b"o/1\n", b"\xff/1"])
    | st.binary(max_size=6),
    st.none() | st.binary(max_size=4),
    _headers,
    st.sampled_from(["_crossfeed.f.changes", "t"]),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(-(2**40), 2**45),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_raw, max_size=20))
def test_the_columns_say_what_the_rules_say_row_by_row(raws):
    assert rows_of(parse(raw_table(raws))) == [reference(*r) for r in raws]


def test_release_orders_transactions_and_frames_them():
    rows = [change(30, "b", 1, 1), change(20, "z", 2, 2), change(20, "a", 1, 1)]
    rows.append(change(20, "z", 1, 2))
    out = release(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == [
        "begin", "a-1", "commit",
        "begin", "z-1", "z-2", "commit",
        "begin", "b-1", "commit",
    ]  # fmt: skip
    assert (out.events, out.txns, out.dead_letters) == (4, 3, 0)
    begin = dict(out.records[3][3])
    assert begin[H.TXN] == b"z/0/2" and begin[H.COMMIT_TS] == b"20"
    data = dict(out.records[4][3])
    assert data[H.TIMESTAMP] == b"1234" and data[H.SRC] == b"C1/orders/3/77"
    assert all(r[0] == SORTED for r in out.records)


def test_release_keeps_to_the_window():
    rows = [change(10, "old", 1, 1), change(11, "in", 1, 1), change(31, "later", 1, 1)]
    out = release(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == ["begin", "in-1", "commit"]


def test_an_incomplete_transaction_goes_to_the_dlq_whole():
    rows = [change(20, "t", 1, 3), change(20, "t", 3, 3), change(25, "ok", 1, 1)]
    out = release(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == ["dlq", "dlq", "begin", "ok-1", "commit"]
    letter = dict(out.records[0][3])
    assert letter[dlq.ERROR_CLASS] == b"IncompleteTransaction"
    assert b"has 2 changes" in letter[dlq.ERROR_MESSAGE]
    assert b"reached 30" in letter[dlq.ERROR_MESSAGE]
    assert letter[dlq.FEED] == b"f" and letter[dlq.STAGE] == b"sorter"
    assert letter[dlq.TOPIC] == b"orders" and letter[dlq.OFFSET] == b"77"
    assert (out.events, out.txns, out.dead_letters) == (1, 1, 2)


def test_one_txn_id_at_two_commit_ts_is_two_incomplete_transactions():
    rows = [change(20, "t", 1, 2), change(21, "t", 2, 2)]
    out = release(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == ["dlq", "dlq"]


def test_late_and_unreadable_letters():
    (row,) = rows_of(change(5, "t", 1, 1))
    topic, key, value, hdrs = late_letter(row, FEED, Window(10, 30))
    assert topic == "_crossfeed.dlq" and (key, value) == (row.key, row.value)
    context = dict(hdrs)
    assert context[dlq.ERROR_CLASS] == b"LateChange"
    assert context[dlq.ERROR_MESSAGE] == b"commit_ts 5 arrived after the feed's resolved_ts 10"
    assert hdrs[: len(row.headers)] == row.headers  # its own headers first
    bad = dead_letter(row, FEED, "UnreadableChange", "why")
    assert dict(bad[3])[dlq.ERROR_MESSAGE] == b"why"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.sampled_from("abc"), st.integers(1, 4)),
        max_size=12,
    ),
    st.integers(0, 7),
    st.randoms(use_true_random=False),
)
def test_release_is_the_rules_in_order(txns, high, rnd: random.Random):
    """Whatever the arrival order: complete transactions in the window come out whole,
    framed, in (commit_ts, txn) order; every other row of the window is a dead letter;
    rows outside it are not touched. Some transactions lose a change, some have one twice."""
    rows: list[pa.Table] = []
    complete: dict[tuple[int, str], int] = {}
    for (ts, txn), count in {(ts, txn): count for ts, txn, count in txns}.items():
        seqs = list(range(1, count + 1))
        if rnd.random() < 0.3:
            seqs.pop(rnd.randrange(len(seqs)))
        elif rnd.random() < 0.2:
            seqs.append(rnd.choice(seqs))  # one change twice: not complete either
        for seq in seqs:
            rows.append(change(ts, txn, seq, count))
        if len(seqs) == count:
            complete[(ts, txn)] = count
    rnd.shuffle(rows)
    window = Window(0, high)
    out = release(together(rows), window, FEED)
    want: list[str] = []
    for (ts, txn), count in sorted(complete.items()):
        if window.releases(ts):
            want += ["begin", *(f"{txn}-{s}" for s in range(1, count + 1)), "commit"]
    assert [k for k in kinds(out.records) if k != "dlq"] == want
    in_window = [r for r in rows_of(together(rows)) if window.releases(r.commit_ts or 0)]
    assert out.events + out.dead_letters == len(in_window)
    assert out.txns == sum(1 for (ts, _t) in complete if window.releases(ts))
    assert rules.NOTHING_RELEASED < 0


def test_split_cuts_a_big_release_between_commit_ts_only():
    counts = {11: 3, 12: 4, 13: 2, 20: 1, 40: 5}
    assert split(counts, Window(10, 30), 100) == [Window(10, 30)]
    assert split(counts, Window(10, 30), 7) == [Window(10, 12), Window(12, 30)]
    assert split(counts, Window(10, 30), 4) == [Window(10, 11), Window(11, 12), Window(12, 30)]
    assert split(counts, Window(10, 30), 3) is None  # commit_ts 12 alone holds 4
    assert split({}, Window(10, 30), 3) == [Window(10, 30)]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(1, 50), st.integers(1, 6), max_size=20),
    st.integers(0, 30),
    st.integers(1, 12),
)
def test_split_covers_the_window_in_order_within_the_limit(counts, low, limit):
    window = Window(low, low + 25)
    parts = split(counts, window, limit)
    inside = {ts: n for ts, n in counts.items() if window.releases(ts)}
    if parts is None:
        assert max(inside.values()) > limit
        return
    assert (
        parts[0].prev_resolved_ts == window.prev_resolved_ts
        and parts[-1].resolved_ts == window.resolved_ts
    )
    for a, b in itertools.pairwise(parts):
        assert a.resolved_ts == b.prev_resolved_ts and not a.empty
    for part in parts:
        assert sum(n for ts, n in inside.items() if part.releases(ts)) <= limit
    # every commit_ts of the window in exactly one part
    for ts in inside:
        assert sum(part.releases(ts) for part in parts) == 1
