"""The driver path of the sorter (services/sorter/driver_release.py): rows parsed as the
rules say, released in (commit_ts, txn, seq) order between begin/commit markers, incomplete
transactions and bad or late rows to the DLQ with their context. Spark's parse and these
are held to the same columns by tests/integration/test_sorter_parse.py."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed import dlq
from crossfeed.services.sorter import rules
from crossfeed.services.sorter.driver_release import (
    ParsedRow,
    dead_letter,
    late_letter,
    parse_row,
    release,
    split,
)
from crossfeed.services.sorter.rules import Window
from crossfeed.wire import headers as H

pytestmark = pytest.mark.unit

FEED = "f"
SORTED = "_crossfeed.f.sorted"


def change(ts: int, txn: str, seq: int, count: int, value: bytes | None = None) -> ParsedRow:
    return parse_row(
        b"k",
        value or f"{txn}-{seq}".encode(),
        [
            (H.COMMIT_TS, str(ts).encode()),
            (H.TXN, f"{txn}/{seq}/{count}".encode()),
            (H.SRC, b"C1/orders/3/77"),
        ],
        "_crossfeed.f.changes",
        1,
        9,
        1234,
    )


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
    row = change(17, "tx", 2, 3)
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
    row = parse_row(key, b"v", hdrs, "_crossfeed.f.changes", 2, 7, 0)
    assert row.kind == kind
    assert (row.error is None) if error is None else (error in (row.error or ""))
    if kind == "mark":
        assert row.part == "orders/4" and row.commit_ts == 20
    # a dead letter names the staging record when crossfeed-src is absent
    assert (row.src_topic, row.src_partition, row.src_offset) == ("_crossfeed.f.changes", 2, 7)


def test_a_change_without_txn_is_a_transaction_of_its_own():
    row = parse_row(None, b"v", [(H.COMMIT_TS, b"8"), (H.SRC, b"/orders/4/100")], "t", 0, 0, 0)
    assert (row.kind, row.txn_id, row.seq, row.count) == ("data", ":orders:4:100", 1, 1)


def test_release_orders_transactions_and_frames_them():
    rows = [change(30, "b", 1, 1), change(20, "z", 2, 2), change(20, "a", 1, 1)]
    rows.append(change(20, "z", 1, 2))
    out = release(rows, Window(10, 30), FEED)
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
    out = release(rows, Window(10, 30), FEED)
    assert kinds(out.records) == ["begin", "in-1", "commit"]


def test_an_incomplete_transaction_goes_to_the_dlq_whole():
    rows = [change(20, "t", 1, 3), change(20, "t", 3, 3), change(25, "ok", 1, 1)]
    out = release(rows, Window(10, 30), FEED)
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
    out = release(rows, Window(10, 30), FEED)
    assert kinds(out.records) == ["dlq", "dlq"]


def test_late_and_unreadable_letters():
    row = change(5, "t", 1, 1)
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
    rows outside it are not touched. Some transactions lose a change."""
    rows: list[ParsedRow] = []
    complete: dict[tuple[int, str], int] = {}
    for (ts, txn), count in {(ts, txn): count for ts, txn, count in txns}.items():
        seqs = list(range(1, count + 1))
        if rnd.random() < 0.3:
            seqs.pop(rnd.randrange(len(seqs)))
        for seq in seqs:
            rows.append(change(ts, txn, seq, count))
        if len(seqs) == count:
            complete[(ts, txn)] = count
    rnd.shuffle(rows)
    window = Window(0, high)
    out = release(rows, window, FEED)
    want: list[str] = []
    for (ts, txn), count in sorted(complete.items()):
        if window.releases(ts):
            want += ["begin", *(f"{txn}-{s}" for s in range(1, count + 1)), "commit"]
    assert [k for k in kinds(out.records) if k != "dlq"] == want
    in_window = [r for r in rows if window.releases(r.commit_ts or 0)]
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
    assert parts[0].low == window.low and parts[-1].high == window.high
    for a, b in itertools.pairwise(parts):
        assert a.high == b.low and not a.empty
    for part in parts:
        assert sum(n for ts, n in inside.items() if part.releases(ts)) <= limit
    # every commit_ts of the window in exactly one part
    for ts in inside:
        assert sum(part.releases(ts) for part in parts) == 1
