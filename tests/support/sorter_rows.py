"""Rows of a changes topic and what the sorter must read in each: one table, written out
by hand, that both release engines are held to (Spark SQL's ``spark_release.parse_rows`` in
tests/integration/test_sorter_parse.py, pyarrow's ``driver_rows.parse`` in
tests/unit/sorter/test_driver_rows.py). The values sit on both sides of the grammar's
bounds (crossfeed/wire/grammar.py): seq and count at most 9 digits, commit_ts and an
offset at most 19 digits and 2^63-1, a txn id printable ASCII without ' ', '/' or ':'.

:data:`RAW_ROWS` draws rows of any bytes, their headers mostly near the grammar, for the
property tests of each engine and of the two against each other.

Every row is staged at partition :data:`PARTITION` of :data:`STAGING`, at the offset of
its place in :data:`CASES`, with the timestamp :data:`WHEN`; its value is its label.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from crossfeed.services.sorter.segments import HEADERS
from crossfeed.wire import headers as H

STAGING = "_crossfeed.f.changes"
PARTITION = 2
WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
WHEN_MS = 1767323045678
MAX_LONG = "9223372036854775807"  # 2**63 - 1, written out
# Every character a txn id may hold: printable ASCII but ' ', '/' and ':'.
EVERY_ID_CHAR = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "/:")

UNREADABLE = f"{H.TXN} and {H.PROV} unreadable"
NO_TS = f"no valid {H.COMMIT_TS} header"
SEQ = f"{H.TXN} seq outside 1..count"
MARK_KEY = "resolved mark key is not topic/partition"
MARK_TS = f"resolved mark without a valid {H.COMMIT_TS}"


@dataclass(frozen=True)
class Case:
    label: str
    headers: list[tuple[str, bytes]]
    key: bytes | None
    kind: str
    commit_ts: int | None
    txn: tuple[str | None, int | None, int | None] = (None, None, None)  # id, seq, count
    error: str | None = None
    part: str | None = None
    src: tuple[str, str, int, int] | None = None  # None: the staging record's position
    extra: dict[str, Any] = field(default_factory=dict)


def _ts(value: str | bytes) -> tuple[str, bytes]:
    return (H.COMMIT_TS, value.encode() if isinstance(value, str) else value)


def _txn(value: str | bytes) -> tuple[str, bytes]:
    return (H.TXN, value.encode() if isinstance(value, str) else value)


def _src(value: str | bytes) -> tuple[str, bytes]:
    """The legacy form (a change copied by an older puller)."""
    return (H.SRC, value.encode() if isinstance(value, str) else value)


def _prov(value: str | bytes) -> tuple[str, bytes]:
    return (H.PROV, value.encode() if isinstance(value, str) else value)


_MARK = (H.TYPE, b"resolved")
OWN = (None, 1, 1)  # no crossfeed-txn and no readable provenance: no id, seq 1 of 1

CASES: list[Case] = [
    # data rows
    Case("data", [_ts("17"), _txn("tx/2/3"), _src("C1/orders/4/99")], b"k", "data", 17,
         ("tx", 2, 3), src=("C1", "orders", 4, 99)),
    Case("no txn", [_ts("18"), _src("C1/orders/4/100")], b"k", "data", 18,
         ("C1:orders:4:100", 1, 1), src=("C1", "orders", 4, 100)),
    Case("empty cluster id", [_ts("18"), _src("/orders/4/100")], None, "data", 18,
         (":orders:4:100", 1, 1), src=("", "orders", 4, 100)),
    Case("commit_ts 0", [_ts("0"), _txn("t/1/1")], b"k", "data", 0, ("t", 1, 1)),
    Case("commit_ts 2^63-1", [_ts(MAX_LONG), _txn("t/1/1")], b"k", "data", 2**63 - 1,
         ("t", 1, 1)),
    Case("19 digits, leading zeros", [_ts("0000000000000000042"), _txn("t/1/1")], b"k",
         "data", 42, ("t", 1, 1)),
    Case("seq and count of 9 digits", [_ts("5"), _txn("t/999999999/999999999")], b"k",
         "data", 5, ("t", 999999999, 999999999)),
    Case("seq of 9 digits, leading zeros", [_ts("5"), _txn("t/000000001/2")], b"k", "data",
         5, ("t", 1, 2)),
    Case("every id character", [_ts("5"), _txn(f"{EVERY_ID_CHAR}/1/1")], b"k", "data", 5,
         (EVERY_ID_CHAR, 1, 1)),
    Case("one-character id", [_ts("5"), _txn("x/1/1")], b"k", "data", 5, ("x", 1, 1)),
    Case("src offset 2^63-1", [_ts("5"), _src(f"C/t/0/{MAX_LONG}")], b"k", "data", 5,
         (f"C:t:0:{MAX_LONG}", 1, 1), src=("C", "t", 0, 2**63 - 1)),
    Case("src partition of 9 digits", [_ts("5"), _src("C/t/999999999/1")], b"k", "data", 5,
         ("C:t:999999999:1", 1, 1), src=("C", "t", 999999999, 1)),
    # an offset of 19 digits above 2^63-1 still names the transaction, but a dead letter
    # can only name the staging record
    Case("src offset over 2^63-1", [_ts("5"), _src("C/t/1/9223372036854775808")], b"k",
         "data", 5, ("C:t:1:9223372036854775808", 1, 1), extra={"src_cluster": "C",
         "src_topic": "t", "src_partition": 1}),
    Case("first header of a name counts",
         [_ts("12"), _txn("t/1/2"), _ts("99"), _txn("u/1/1")], b"k", "data", 12, ("t", 1, 2)),
    # crossfeed-prov: the source record is the last hop's, whatever the hops before it
    Case("prov, no txn", [_ts("18"), _prov("A,C1/orders/4/100")], b"k", "data", 18,
         ("C1:orders:4:100", 1, 1), src=("C1", "orders", 4, 100)),
    Case("prov first hop: the legacy src's txn id", [_ts("18"), _prov("C1/orders/4/100")],
         b"k", "data", 18, ("C1:orders:4:100", 1, 1), src=("C1", "orders", 4, 100)),
    Case("prov with an origin topic", [_ts("18"), _prov("A,B,C1/a.orders/4/100/orders")],
         b"k", "data", 18, ("C1:a.orders:4:100", 1, 1), src=("C1", "a.orders", 4, 100)),
    Case("prov with a txn", [_ts("17"), _txn("tx/2/3"), _prov("A,C1/orders/4/99")], b"k",
         "data", 17, ("tx", 2, 3), src=("C1", "orders", 4, 99)),
    Case("prov, empty last hop", [_ts("18"), _prov("A,/orders/4/100")], None, "data", 18,
         (":orders:4:100", 1, 1), src=("", "orders", 4, 100)),
    Case("prov wins over a legacy src", [_ts("18"), _src("X/o/1/1"), _prov("C1/orders/4/1")],
         b"k", "data", 18, ("C1:orders:4:1", 1, 1), src=("C1", "orders", 4, 1)),
    Case("unreadable prov, readable legacy src", [_ts("18"), _prov("C1/orders/x/1"),
         _src("X/o/1/1")], b"k", "data", 18, ("X:o:1:1", 1, 1), src=("X", "o", 1, 1)),
    # commit_ts out of the grammar
    Case("commit_ts 2^63", [_ts("9223372036854775808"), _txn("t/1/1")], b"k", "bad", None,
         ("t", 1, 1), NO_TS),
    Case("commit_ts of 19 nines", [_ts("9" * 19), _txn("t/1/1")], b"k", "bad", None,
         ("t", 1, 1), NO_TS),
    Case("commit_ts of 20 digits", [_ts("0" * 19 + "1"), _txn("t/1/1")], b"k", "bad", None,
         ("t", 1, 1), NO_TS),
    Case("no commit_ts", [_txn("t/1/1")], b"k", "bad", None, ("t", 1, 1), NO_TS),
    Case("empty commit_ts", [_ts(""), _txn("t/1/1")], b"k", "bad", None, ("t", 1, 1), NO_TS),
    Case("commit_ts not decimal", [_ts("x1"), _txn("t/1/1")], b"k", "bad", None, ("t", 1, 1),
         NO_TS),
    Case("negative commit_ts", [_ts("-1"), _txn("t/1/1")], b"k", "bad", None, ("t", 1, 1),
         NO_TS),
    Case("commit_ts with a space", [_ts(" 1"), _txn("t/1/1")], b"k", "bad", None,
         ("t", 1, 1), NO_TS),
    Case("commit_ts newline", [_ts("12\n"), _txn("t/1/1")], b"k", "bad", None, ("t", 1, 1),
         NO_TS),
    Case("commit_ts of other digits", [_ts("１２"), _txn("t/1/1")], b"k", "bad", None,
         ("t", 1, 1), NO_TS),
    # crossfeed-txn out of the grammar
    Case("count of 10 digits", [_ts("5"), _txn("t/1/1000000000")], b"k", "bad", 5,
         (None, None, None), UNREADABLE),
    Case("seq of 10 digits", [_ts("5"), _txn("t/0000000001/1")], b"k", "bad", 5,
         (None, None, None), UNREADABLE),
    Case("seq 0", [_ts("5"), _txn("tx/0/3")], b"k", "bad", 5, ("tx", 0, 3), SEQ),
    Case("seq over count", [_ts("5"), _txn("tx/4/3")], b"k", "bad", 5, ("tx", 4, 3), SEQ),
    Case("count 0", [_ts("5"), _txn("tx/1/0")], b"k", "bad", 5, ("tx", 1, 0), SEQ),
    Case("two fields", [_ts("5"), _txn("tx/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("colon in id", [_ts("5"), _txn("a:b/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("slash in id", [_ts("5"), _txn("a/b/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("space in id", [_ts("5"), _txn("a b/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("tab in id", [_ts("5"), _txn("a\tb/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("DEL in id", [_ts("5"), _txn("a\x7fb/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("id not ASCII", [_ts("5"), _txn("é/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("empty id", [_ts("5"), _txn("/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("txn not UTF-8", [_ts("5"), _txn(b"\xff/1/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("seq not decimal", [_ts("5"), _txn("tx/x/1")], b"k", "bad", 5, (None, None, None),
         UNREADABLE),
    Case("txn newline", [_ts("12"), _txn("t/1/1\n")], b"k", "bad", 12, (None, None, None),
         UNREADABLE),
    Case("id newline", [_ts("12"), _txn("t\n/1/1")], b"k", "bad", 12, (None, None, None),
         UNREADABLE),
    # crossfeed-src out of the grammar (no crossfeed-txn: the row has no transaction)
    Case("no txn, no src", [_ts("5")], b"k", "bad", 5, OWN, UNREADABLE),
    Case("src of three fields", [_ts("5"), _src("C/orders/3")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("src partition not decimal", [_ts("5"), _src("C/orders/x/1")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("src of five fields", [_ts("5"), _src("a/b/c/1/2")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("src partition of 10 digits", [_ts("5"), _src("C/t/1234567890/1")], b"k", "bad", 5,
         OWN, UNREADABLE),
    Case("src offset of 20 digits", [_ts("5"), _src("C/t/1/" + "0" * 19 + "1")], b"k",
         "bad", 5, OWN, UNREADABLE),
    Case("src empty topic", [_ts("5"), _src("C//1/2")], b"k", "bad", 5, OWN, UNREADABLE),
    Case("src newline", [_ts("12"), _src("C1/orders/4/100\n")], b"k", "bad", 12, OWN,
         UNREADABLE),
    Case("prov of three fields", [_ts("5"), _prov("A,C/orders/3")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("prov of six fields", [_ts("5"), _prov("C/t/1/2/o/p")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("prov, empty origin topic", [_ts("5"), _prov("C/t/1/2/")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("prov, empty earlier hop", [_ts("5"), _prov("A,,C/t/1/2")], b"k", "bad", 5, OWN,
         UNREADABLE),
    Case("prov partition of 10 digits", [_ts("5"), _prov("A,C/t/1234567890/1")], b"k",
         "bad", 5, OWN, UNREADABLE),
    Case("prov newline", [_ts("12"), _prov("A,C1/orders/4/100\n")], b"k", "bad", 12, OWN,
         UNREADABLE),
    # resolved marks
    Case("mark", [_MARK, _ts("20")], b"orders/4", "mark", 20, OWN, part="orders/4"),
    Case("mark, partition of 9 digits", [_MARK, _ts("20")], b"orders/999999999", "mark", 20,
         OWN, part="orders/999999999"),
    Case("mark at 2^63-1", [_MARK, _ts(MAX_LONG)], b"o/0", "mark", 2**63 - 1, OWN,
         part="o/0"),
    Case("mark, partition of 10 digits", [_MARK, _ts("20")], b"orders/1234567890", "bad", 20,
         OWN, MARK_KEY, part="orders/1234567890"),
    Case("mark key without partition", [_MARK, _ts("20")], b"orders", "bad", 20, OWN,
         MARK_KEY, part="orders"),
    Case("mark key of three fields", [_MARK, _ts("20")], b"a/b/3", "bad", 20, OWN, MARK_KEY,
         part="a/b/3"),
    Case("mark key without topic", [_MARK, _ts("20")], b"/3", "bad", 20, OWN, MARK_KEY,
         part="/3"),
    Case("mark without key", [_MARK, _ts("21")], None, "bad", 21, OWN, MARK_KEY),
    Case("mark key newline", [_MARK, _ts("22")], b"orders/5\n", "bad", 22, OWN, MARK_KEY,
         part="orders/5\n"),
    Case("mark without commit_ts", [_MARK], b"orders/4", "bad", None, OWN, MARK_TS,
         part="orders/4"),
    Case("mark at 2^63", [_MARK, _ts("9223372036854775808")], b"orders/4", "bad", None, OWN,
         MARK_TS, part="orders/4"),
    # other types
    Case("unknown type", [(H.TYPE, b"begin"), _ts("5"), _txn("t/1/1")], b"k", "bad", 5,
         ("t", 1, 1), f"unknown {H.TYPE} begin"),
    Case("type not UTF-8", [(H.TYPE, b"\xff"), _ts("5")], b"k", "bad", 5, OWN,
         f"unknown {H.TYPE} \ufffd"),
]  # fmt: skip


Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], str, int, int, int]
"""A row of the changes topic: key, value, headers, topic, partition, offset, timestamp ms."""


def staged(offset: int, case: Case) -> Raw:
    """:data:`CASES` ``[offset]`` as a row of the changes topic."""
    return (case.key, case.label.encode(), list(case.headers), STAGING, PARTITION, offset, WHEN_MS)


def raw_table(rows: list[Raw]) -> pa.Table:
    """Rows as Spark's Kafka source gives them to the sorter's driver."""
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


def expected(offset: int, case: Case) -> dict[str, Any]:
    """The row :data:`CASES` ``[offset]`` parses to: every column of the engines'
    schema (services/sorter/segments.SCHEMA)."""
    cluster, topic, partition, src_offset = case.src or ("", STAGING, PARTITION, offset)
    row = {
        "key": case.key,
        "value": case.label.encode(),
        "headers": case.headers,
        "timestamp_ms": WHEN_MS,
        "kind": case.kind,
        "commit_ts": case.commit_ts,
        "part": case.part,
        "txn_id": case.txn[0],
        "seq": case.txn[1],
        "count": case.txn[2],
        "src_cluster": cluster,
        "src_topic": topic,
        "src_partition": partition,
        "src_offset": src_offset,
        "error": case.error,
    }
    row.update(case.extra)
    return row


_header_values = {
    H.TYPE: [b"resolved", b"begin", b"\xff"],
    H.COMMIT_TS: [b"12", b"12\n", b"x", b"-1", b"", b"007", MAX_LONG.encode(),
                  b"9223372036854775808", b"1" * 20],
    H.TXN: [b"t/1/2", b"t/3/2", b"t/0/1", b"a:b/1/1", b"t/1/2\n", b"/1/1", b"t/1",
            b"t/999999999/999999999", b"t/1/1000000000", "é/1/1".encode()],
    H.PROV: [b"C/t/1/2", b"A,C/t/1/2", b"A,B,C/t/1/2/o", b",C/t/1/2", b"A,/t/1/2",
             b"C/t/1/2/", b"A,C/t/x/2", b"C/t/1/9223372036854775808", b"A,C/t/1/2\n",
             b"A\n,C/t/1/2", b"C/t/999999999/1/o\n"],
    H.SRC: [b"C/t/1/2", b"/t/1/2", b"C/t/x/2", b"C/t/1/9223372036854775808", b"C/t/1/2\n",
            b"C/t/999999999/1", b"C/t/1234567890/1"],
    "other": [b"z"],
}  # fmt: skip
_headers = st.lists(
    st.sampled_from(sorted(_header_values)).flatmap(
        lambda name: st.tuples(
            st.just(name), st.none() | st.sampled_from(_header_values[name]) | st.binary(max_size=6)
        )
    ),
    max_size=6,
)
RAW_ROWS = st.tuples(
    st.none()
    | st.sampled_from([b"orders/4", b"orders", b"o/1\n", b"\xff/1"])
    | st.binary(max_size=6),
    st.none() | st.binary(max_size=4),
    _headers,
    st.sampled_from([STAGING, "t"]),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(-(2**40), 2**45),
)
"""Rows of a changes topic, headers mostly near the grammar: what both engines must read
alike (tests/integration/test_sorter_parse.py)."""


assert len({c.label for c in CASES}) == len(CASES)
assert int(WHEN.timestamp() * 1000) == WHEN_MS
