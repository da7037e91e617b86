"""The driver's column functions (services/sorter/driver_rows.py): rows parsed as the
table of tests/support/sorter_rows.py says and as the grammar's bounds say (property tests),
a window's rows in (commit_ts, txn, seq) order, each with its place in its transaction, incomplete
transactions and bad or late rows to the DLQ with their context. Spark's parse is held to
the same table, and the two engines to each other, by tests/integration/test_sorter_parse.py."""

from __future__ import annotations

import dataclasses
import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed import dlq
from crossfeed.services.sorter import rules
from crossfeed.services.sorter.driver_rows import (
    ParsedRow,
    dead_letter,
    late_letter,
    parse,
    rows_of,
    window_records,
)
from crossfeed.services.sorter.rules import Window
from crossfeed.wire import grammar
from crossfeed.wire import headers as H
from tests.support import sorter_rows

pytestmark = pytest.mark.unit

FEED = "f"
SORTED = "_crossfeed.f.sorted"

Raw = sorter_rows.Raw
raw_table = sorter_rows.raw_table


def parse_one(*raw: object) -> ParsedRow:
    (row,) = rows_of(parse(raw_table([raw])))  # type: ignore[list-item]
    return row


def change(ts: int, txn: str, seq: int, count: int, value: bytes | None = None) -> pa.Table:
    """One data row of the changes topic, parsed (a table of driver_rows.SCHEMA)."""
    hdrs = [
        (H.COMMIT_TS, str(ts).encode()),
        (H.TXN, f"{txn}/{seq}/{count}".encode()),
        (H.PROV, b"C0,C1/orders/3/77"),
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


def test_a_change_parses_to_its_fields():
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
    ("offset", "case"), list(enumerate(sorter_rows.CASES)), ids=[c.label for c in sorter_rows.CASES]
)
def test_each_row_of_the_table_parses_as_it_says(offset, case):
    (row,) = rows_of(parse(raw_table([sorter_rows.staged(offset, case)])))
    assert dataclasses.asdict(row) == sorter_rows.expected(offset, case)


def test_the_table_parsed_at_once_is_the_rows_parsed_one_by_one():
    rows = rows_of(
        parse(raw_table([sorter_rows.staged(i, c) for i, c in enumerate(sorter_rows.CASES)]))
    )
    assert [dataclasses.asdict(r) for r in rows] == [
        sorter_rows.expected(i, c) for i, c in enumerate(sorter_rows.CASES)
    ]


# Fields anywhere inside the grammar's bounds (crossfeed/wire/grammar.py).
_ids = st.text(alphabet=sorter_rows.EVERY_ID_CHAR, min_size=1, max_size=16)
_longs = st.integers(0, grammar.MAX_LONG)
_counts = st.integers(1, grammar.MAX_COUNT)
_names = st.text(alphabet=st.characters(blacklist_characters="/", codec="utf-8"), max_size=8)
_hops = st.text(alphabet=st.characters(blacklist_characters="/,", codec="utf-8"), max_size=8)


def _digits(value: int, data: st.DataObject, width: int) -> str:
    """``value`` in decimal, with leading zeros up to ``width`` digits at random."""
    text = str(value)
    return text.zfill(data.draw(st.integers(len(text), width)))


@settings(max_examples=150, deadline=None)
@given(_longs, _ids, _counts, st.data())
def test_a_change_inside_the_bounds_parses_to_its_fields(commit_ts, txn_id, count, data):
    seq = data.draw(st.integers(1, count))
    legacy = data.draw(st.booleans())  # crossfeed-src, else crossfeed-prov
    cluster = data.draw(_names if legacy else _hops)
    topic = data.draw(_names.filter(bool))
    partition, offset = data.draw(st.integers(0, 999_999_999)), data.draw(_longs)
    src = f"{cluster}/{topic}/{_digits(partition, data, 9)}/{_digits(offset, data, 19)}"
    if legacy:
        provenance = (H.SRC, src.encode())
    else:  # hops before the last, and an origin topic, change nothing here
        earlier = "".join(f"{hop}," for hop in data.draw(st.lists(_hops.filter(bool))))
        origin = data.draw(st.sampled_from(["", "/o", f"/{topic}"]))
        provenance = (H.PROV, f"{earlier}{src}{origin}".encode())
    hdrs = [(H.COMMIT_TS, _digits(commit_ts, data, 19).encode()), provenance]
    with_txn = data.draw(st.booleans())
    if with_txn:
        txn = f"{txn_id}/{_digits(seq, data, 9)}/{_digits(count, data, 9)}"
        hdrs.append((H.TXN, txn.encode()))
    row = parse_one(b"k", b"v", hdrs, "t", 0, 5, 0)
    assert (row.kind, row.error, row.commit_ts) == ("data", None, commit_ts)
    own = (src.replace("/", ":"), 1, 1)  # the fields as written, leading zeros kept
    assert (row.txn_id, row.seq, row.count) == ((txn_id, seq, count) if with_txn else own)
    assert (row.src_cluster, row.src_topic, row.src_partition, row.src_offset) == (
        cluster,
        topic,
        partition,
        offset,
    )


def _broken(kind: str, data: st.DataObject) -> tuple[list[tuple[str, bytes]], str]:
    """Headers of a change with one field just past the grammar, and the error it gets."""
    ts, txn = "5", "t/1/1"
    if kind == "commit_ts over 2^63-1":
        ts = str(data.draw(st.integers(grammar.MAX_LONG + 1, 10**19 - 1)))
    elif kind == "commit_ts of 20 digits or more":
        ts = _digits(data.draw(st.integers(0, 10**25)), data, 26).zfill(20)
    elif kind == "seq or count of 10 digits or more":
        seq, count = "1", _digits(data.draw(st.integers(1, 10**12 - 1)), data, 13).zfill(10)
        if data.draw(st.booleans()):
            seq = count
        txn = f"t/{seq}/{count}"
    else:  # a character a txn id may not hold, anywhere in it
        ident = data.draw(_ids)
        at = data.draw(st.integers(0, len(ident)))
        bad = data.draw(st.sampled_from(" /:\t\n\x7f\x00é€"))
        txn = f"{ident[:at]}{bad}{ident[at:]}/1/1"
    hdrs = [(H.COMMIT_TS, ts.encode()), (H.TXN, txn.encode()), (H.SRC, b"C/t/1/2")]
    no_ts = kind.startswith("commit_ts")
    return hdrs, f"no valid {H.COMMIT_TS} header" if no_ts else f"{H.TXN} and {H.PROV} unreadable"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        [
            "commit_ts over 2^63-1",
            "commit_ts of 20 digits or more",
            "seq or count of 10 digits or more",
            "a character outside a txn id",
        ]
    ),
    st.data(),
)
def test_a_field_past_its_bound_makes_the_change_unreadable(kind, data):
    hdrs, error = _broken(kind, data)
    row = parse_one(b"k", b"v", hdrs, "t", 0, 5, 0)
    assert (row.kind, row.error) == ("bad", error), hdrs


@settings(max_examples=300, deadline=None)
@given(st.lists(sorter_rows.RAW_ROWS, max_size=20))
def test_any_rows_parse_into_rows_the_release_can_trust(raws):
    """Whatever the bytes: one row out per row in, in order, with the row's own bytes; a
    data row has a commit_ts, a txn id and 1 <= seq <= count inside the bounds; a mark
    has a commit_ts and its key; anything else is bad and says why."""
    rows = rows_of(parse(raw_table(raws)))
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in rows] == [
        (raw[0], raw[1], raw[2], raw[6]) for raw in raws
    ]
    for row in rows:
        assert row.kind in ("data", "mark", "bad")
        assert (row.kind == "bad") == (row.error is not None)
        if row.kind == "data":
            assert row.txn_id and row.commit_ts is not None and row.commit_ts >= 0
            assert 1 <= row.seq <= row.count <= grammar.MAX_COUNT  # type: ignore[operator]
        elif row.kind == "mark":
            assert row.commit_ts is not None and row.part is not None


def test_release_orders_transactions_and_places_each_change_in_its_own():
    rows = [change(30, "b", 1, 1), change(20, "z", 2, 2), change(20, "a", 1, 1)]
    rows.append(change(20, "z", 1, 2))
    out = window_records(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == ["a-1", "z-1", "z-2", "b-1"]  # no begin or commit records
    assert [dict(r[3])[H.ORDER] for r in out.records] == [
        b"1/1/20/a", b"1/2/20/z", b"2/2/20/z", b"1/1/30/b"
    ]  # fmt: skip
    assert (out.events, out.txns, out.dead_letters) == (4, 3, 0)
    data = dict(out.records[2][3])
    assert data[H.TXN] == b"z/2/2" and data[H.COMMIT_TS] == b"20"  # as in .changes
    assert data[H.TIMESTAMP] == b"1234" and data[H.PROV] == b"C0,C1/orders/3/77"
    assert all(r[0] == SORTED for r in out.records)


def test_release_keeps_to_the_window():
    rows = [change(10, "old", 1, 1), change(11, "in", 1, 1), change(31, "later", 1, 1)]
    out = window_records(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == ["in-1"]


def test_an_incomplete_transaction_goes_to_the_dlq_whole():
    rows = [change(20, "t", 1, 3), change(20, "t", 3, 3), change(25, "ok", 1, 1)]
    out = window_records(together(rows), Window(10, 30), FEED)
    assert kinds(out.records) == ["dlq", "dlq", "ok-1"]
    letter = dict(out.records[0][3])
    assert letter[dlq.ERROR_CLASS] == b"IncompleteTransaction"
    assert b"has 2 changes" in letter[dlq.ERROR_MESSAGE]
    assert b"reached 30" in letter[dlq.ERROR_MESSAGE]
    assert letter[dlq.FEED] == b"f" and letter[dlq.STAGE] == b"sorter"
    assert letter[dlq.TOPIC] == b"orders" and letter[dlq.OFFSET] == b"77"
    assert (out.events, out.txns, out.dead_letters) == (1, 1, 2)


def test_one_txn_id_at_two_commit_ts_is_two_incomplete_transactions():
    rows = [change(20, "t", 1, 2), change(21, "t", 2, 2)]
    out = window_records(together(rows), Window(10, 30), FEED)
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
    in (commit_ts, txn) order, each change with its place; every other row of the window is
    a dead letter;
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
    out = window_records(together(rows), window, FEED)
    want: list[str] = []
    for (ts, txn), count in sorted(complete.items()):
        if window.releases(ts):
            want += [f"{txn}-{s}/{s}/{count}/{ts}/{txn}" for s in range(1, count + 1)]
    released = [r for r in out.records if r[0] == SORTED]
    assert [f"{r[2].decode()}/{dict(r[3])[H.ORDER].decode()}" for r in released] == want
    in_window = [r for r in rows_of(together(rows)) if window.releases(r.commit_ts or 0)]
    assert out.events + out.dead_letters == len(in_window)
    assert out.txns == sum(1 for (ts, _t) in complete if window.releases(ts))
    assert rules.NOTHING_RELEASED < 0
