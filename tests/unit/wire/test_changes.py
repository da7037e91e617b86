"""crossfeed.wire.changes: the crossfeed-txn header and ChangeEvent values (invariants A, B)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.wire.changes import (
    ChangeEvent,
    Column,
    Table,
    TxnRef,
    check_txn_id,
    decode_change,
    encode_change,
    parse_txn,
    txn_header,
)
from crossfeed.wire.codec import CodecError

pytestmark = pytest.mark.unit

TXN_IDS = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="/:"),
    min_size=1,
    max_size=40,
)


@given(TXN_IDS, st.integers(1, 10**6), st.integers(0, 10**6))
def test_txn_header_round_trips(txn: str, seq: int, extra: int) -> None:
    count = seq + extra
    value = txn_header(txn, seq, count)
    assert value == f"{txn}/{seq}/{count}".encode()
    assert parse_txn(value) == TxnRef(txn, seq, count)
    assert TxnRef(txn, seq, count).encode() == value


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"t",
        b"t/1",
        b"/1/1",
        b"a:b/1/1",
        b"a b/1/1",
        b"t/0/1",
        b"t/2/1",
        b"t/x/1",
        b"t/1/-1",
        b"t/1/99999999999999999999",
    ],
)
def test_parse_txn_refuses_malformed_values(value: bytes | None) -> None:
    with pytest.raises(ValueError, match="crossfeed-txn"):
        parse_txn(value)


def test_txn_ids_never_hold_slash_or_colon_and_markers_take_seq_0() -> None:
    for bad in ("", "a/b", "a:b", "a b", "é"):
        with pytest.raises(ValueError, match="txn id"):
            check_txn_id(bad)
    with pytest.raises(ValueError):
        txn_header("t", 0, 1)
    assert parse_txn(b"t/0/3", markers=True) == TxnRef("t", 0, 3)
    # A txn id may hold '/'-free punctuation, so parsing splits from the right.
    assert parse_txn(b"a.b-c_d/2/2").txn == "a.b-c_d"


ITEMS = Table(
    "items",
    (
        Column("id", "long", primary_key=True),
        Column("tag", "bytes", primary_key=True),
        Column("name", "string"),
        Column("price", "double"),
        Column("active", "boolean"),
        Column("blob", "bytes"),
    ),
)

ROWS = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "tag": st.binary(max_size=20),
        "name": st.none() | st.text(max_size=20),
        "price": st.none() | st.floats(allow_nan=False) | st.integers(-1000, 1000),
        "active": st.none() | st.booleans(),
        "blob": st.none() | st.binary(max_size=50),
    }
)


@given(ROWS, ROWS)
def test_change_events_round_trip_with_bytes_as_bytes(before: dict, after: dict) -> None:
    after = {**after, "id": before["id"], "tag": before["tag"]}
    for event in (
        ITEMS.insert(after),
        ITEMS.update(before, after),
        ITEMS.update(None, after),
        ITEMS.delete(before),
    ):
        back = decode_change(encode_change(event))
        assert back == event
        for row in (r for r in (back.key, back.before, back.after) if r is not None):
            assert isinstance(row["tag"], bytes)
            assert row.get("blob") is None or isinstance(row["blob"], bytes)
            assert row.get("price") is None or isinstance(row["price"], float)


def test_ddl_raises_the_schema_version_and_carries_the_new_columns() -> None:
    event, table = ITEMS.ddl("add column note", [*ITEMS.columns, Column("note", "string")])
    assert (event.op, event.schema_version, event.key, event.ddl) == (
        "ddl",
        2,
        {},
        "add column note",
    )
    assert decode_change(encode_change(event)) == event
    assert table.insert({"id": 1, "tag": b"", "note": "n"}).schema_version == 2


def test_rows_are_checked_against_the_table() -> None:
    with pytest.raises(ValueError, match="unknown column"):
        ITEMS.insert({"id": 1, "tag": b"", "colour": "red"})
    with pytest.raises(ValueError, match="missing or null"):
        ITEMS.insert({"id": 1})
    with pytest.raises(ValueError, match="is long"):
        ITEMS.insert({"id": "1", "tag": b""})
    with pytest.raises(ValueError, match="is long"):
        ITEMS.insert({"id": True, "tag": b""})
    with pytest.raises(ValueError, match="is boolean"):
        ITEMS.insert({"id": 1, "tag": b"", "active": 1})
    for edge in (2**63 - 1, -(2**63)):  # a long's own range, both ends
        assert ITEMS.insert({"id": edge, "tag": b""}).key == {"id": edge, "tag": b""}
    for beyond in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError, match="out of range"):
            ITEMS.update(None, {"id": 1, "tag": b"", "price": 1.0, "name": "x"} | {"id": beyond})
    with pytest.raises(ValueError, match="primary-key columns must come first"):
        Table("t", (Column("a", "long"), Column("b", "long", primary_key=True)))
    with pytest.raises(ValueError, match="no primary-key"):
        Table("t", (Column("a", "long"),))
    assert Column("k", "long", primary_key=True).nullable is False


def test_events_not_built_by_a_table_get_avros_full_validation() -> None:
    with pytest.raises(ValueError, match="out of range"):
        ITEMS.insert({"id": 2**63, "tag": b""})
    checked = ITEMS.insert({"id": 1, "tag": b"t", "price": 2.0})
    assert checked.checked
    by_hand = ChangeEvent("items", "insert", 1, ITEMS.columns, {"id": 1}, None, {"id": [1]})
    assert not by_hand.checked
    with pytest.raises(CodecError, match="ChangeEvent"):
        encode_change(by_hand)
    assert decode_change(encode_change(checked)) == checked
