"""crossfeed/wire/debezium.py: what crossfeed reads of Debezium's records. The fast path
must agree with a full parse on every value, whatever the columns hold."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.wire import debezium
from crossfeed.wire.debezium import DataEvent, NotDebezium

pytestmark = pytest.mark.unit

SCHEMA = {"type": "struct", "fields": [{"type": "string", "field": "transaction"}]}


def envelope(
    after: dict,
    *,
    txn: dict | None,
    snapshot: str = "false",
    op: str = "u",
    origin: str | None = None,
) -> bytes:
    source = {"version": "3.7.0.Final", "snapshot": snapshot, "table": "t", "txId": 9}
    source |= {"xmin": None, "origin": origin, "origin_lsn": None}
    payload = {
        "before": None,
        "after": after,
        "source": source,
        "transaction": txn,
        "op": op,
        "ts_ms": 1,
    }
    return json.dumps({"schema": SCHEMA, "payload": payload}, separators=(",", ":")).encode()


def test_a_streamed_event_gives_its_xid_and_orders():
    value = envelope(
        {"id": 1}, txn={"id": "739:26842656", "total_order": 2, "data_collection_order": 1}
    )
    assert debezium.data_event(value) == DataEvent("739", 2, 1, None)


def test_a_snapshot_row_has_no_transaction():
    value = envelope({"id": 1}, txn=None, snapshot="last", op="r")
    assert debezium.data_event(value) == DataEvent(None, snapshot="last")


@settings(max_examples=300)
@given(
    text=st.text(),
    key=st.sampled_from(["transaction", "snapshot", "note", "payload", "op"]),
    txn=st.none()
    | st.fixed_dictionaries(
        {
            "id": st.builds(
                lambda xid, lsn: f"{xid}:{lsn}", st.integers(1, 2**32), st.integers(0, 2**40)
            ),
            "total_order": st.integers(1, 10**6),
            "data_collection_order": st.integers(1, 10**6),
        }
    ),
    snapshot=st.sampled_from(["false", "true", "first", "last", "incremental"]),
    origin=st.none() | st.text(),
)
def test_the_fast_path_agrees_with_a_full_parse(text, key, txn, snapshot, origin):
    # A column may be named like an envelope field and hold anything, quotes included.
    value = envelope({key: text, "id": 1}, txn=txn, snapshot=snapshot, origin=origin)
    assert debezium.data_event(value) == debezium._data_event_slow(value)


def test_a_column_named_origin_is_not_the_sources():
    txn = {"id": "5:1", "total_order": 1, "data_collection_order": 1}
    value = envelope({"origin": "crossfeed:x", "id": 1}, txn=txn)
    assert debezium.data_event(value).origin is None
    value = envelope({"origin": None}, txn=txn, origin='crossfeed:f "1"')
    event = debezium.data_event(value)
    assert event.origin == 'crossfeed:f "1"' and debezium.is_crossfeed_origin(event.origin)


def test_only_crossfeed_origins_are_crossfeeds():
    assert debezium.is_crossfeed_origin("crossfeed:bank-a-to-b")
    assert not debezium.is_crossfeed_origin("pg_16384")  # PostgreSQL's own subscription
    assert not debezium.is_crossfeed_origin(None)


@pytest.mark.parametrize(
    "value",
    [b"not json", b"[1,2]", b'{"schema":{},"payload":{"after":{}}}', b""],
)
def test_what_is_not_a_change_event_is_named(value):
    with pytest.raises(NotDebezium):
        debezium.data_event(value)


def test_transaction_records():
    begin = json.dumps({"schema": {}, "payload": {"status": "BEGIN", "id": "1:2"}}).encode()
    assert debezium.txn_record(begin) is None
    end = {
        "status": "END",
        "id": "739:26843344",
        "event_count": 3,
        "data_collections": [
            {"data_collection": "public.transfers", "event_count": 1},
            {"data_collection": "public.accounts", "event_count": 2},
        ],
        "ts_ms": 1795778269312,
    }
    parsed = debezium.txn_record(json.dumps({"schema": {}, "payload": end}).encode())
    assert parsed is not None
    assert (parsed.xid, parsed.lsn, parsed.event_count) == ("739", 26843344, 3)
    assert parsed.collections == (("public.transfers", 1), ("public.accounts", 2))
    assert parsed.ts_us == 1795778269312000 and parsed.txn_id == "739.26843344"
    with pytest.raises(NotDebezium):
        debezium.txn_record(json.dumps({"payload": {"status": "MAYBE"}, "schema": {}}).encode())


def test_heartbeats_and_topic_names():
    beat = json.dumps({"schema": {}, "payload": {"ts_ms": 5}}).encode()
    assert debezium.heartbeat_ts_us(beat) == 5000
    assert debezium.transaction_topic("pg1") == "pg1.transaction"
    assert debezium.heartbeat_topic("pg1") == "__debezium-heartbeat.pg1"
    assert debezium.collection_topic("pg1", "public.accounts") == "pg1.public.accounts"


# -- schema by reference ----------------------------------------------------------------


def _value(schema: object, payload: object) -> bytes:
    return json.dumps(
        {"schema": schema, "payload": payload}, separators=(",", ":"), ensure_ascii=False
    ).encode()


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["payload", "schema", "a", "é"]) | st.text(), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@settings(max_examples=400)
@given(schema=st.dictionaries(st.text() | st.just("payload"), JSONISH, max_size=4), payload=JSONISH)
def test_a_split_value_joins_back_byte_for_byte(schema, payload):
    """Whatever the schema's parameters or the payload hold (a "payload" key nested in
    the schema, ',"payload":' inside a string, non-ASCII), S is exactly the schema half."""
    splitter = debezium.EnvelopeSplitter()
    value = _value(schema, payload)
    for _ in range(2):  # the second time the schema is known
        split = splitter.split(value)
        assert split is not None
        sid, s, p = split
        assert debezium.join_envelope(s, p) == value
        assert json.loads(s) == schema and json.loads(p) == payload
        assert sid == debezium.schema_id(s) and len(sid) == 32


def test_a_nested_payload_key_in_the_schema_is_not_the_cut():
    schema = {"type": "struct", "parameters": {"payload": "x"}, "fields": []}
    value = _value(schema, {"op": "c"})
    _, s, p = debezium.EnvelopeSplitter().split(value)  # type: ignore[misc]
    assert json.loads(s) == schema and p == b'{"op":"c"}'


def test_the_id_names_the_schema_not_the_payload():
    splitter = debezium.EnvelopeSplitter()
    a = splitter.split(_value(SCHEMA, {"op": "c"}))
    b = splitter.split(_value(SCHEMA, {"op": "d"}))
    c = splitter.split(_value({**SCHEMA, "version": 2}, {"op": "c"}))
    assert a and b and c and a[0] == b[0] != c[0]


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b'{"op":"c"}',  # schemas.enable=false: travels whole
        b'{"schema":{"type":"struct"}}',  # no payload
        b'{"schema":{"type":"str',  # cut short
        b'{"schema":[1,2],"payload":{}}',  # a schema half that is not an object
        b'{"schema":{},"payload":{}} ',  # not the converter's bytes
        b'{"schema":{"a":"\xff"},"payload":{}}',  # not UTF-8
    ],
)
def test_what_is_not_the_converter_envelope_is_not_split(value):
    assert debezium.EnvelopeSplitter().split(value) is None
