"""services/sink/postgres/debezium.py: Debezium events -> row changes, types from the
Connect schema in each event."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import uuid
from decimal import Decimal

import pytest

from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.mapping import PG_TYPES, Misfit
from crossfeed.services.sink.schemas import UnknownSchema
from crossfeed.wire.debezium import EnvelopeSplitter

pytestmark = pytest.mark.unit

FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "int16", "optional": True, "field": "small"},
    {"type": "int64", "optional": True, "field": "big"},
    {"type": "float", "optional": True, "field": "f4"} | {"type": "float32"},
    {"type": "double", "optional": True, "field": "f8"} | {"type": "float64"},
    {"type": "boolean", "optional": True, "field": "flag"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "bytes", "optional": True, "field": "raw"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "12"},
        "field": "amount",
    },
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "day"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "tod"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "ts"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "field": "tz"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Uuid", "field": "ref"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Json", "field": "doc"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "field": "mood"},
]
ROW = {
    "id": 7,
    "small": 3,
    "big": 2**40,
    "f4": 1.5,
    "f8": 2.25,
    "flag": True,
    "name": 'a "quoted" name',
    "raw": base64.b64encode(b"\x00\xff").decode(),
    "amount": base64.b64encode((-1050).to_bytes(2, "big", signed=True)).decode(),
    "day": 19000,
    "tod": 3_723_000_004,
    "ts": 1_700_000_000_123_456,
    "tz": "2026-11-27T10:00:00.5Z",
    "ref": "2c078ecc-4ae6-413d-99e0-74fe9986ae8d",
    "doc": '{"a": 1}',
    "mood": "happy",
}


def event(op: str, after: dict | None, fields=FIELDS, table: str = "things") -> tuple[bytes, bytes]:
    row_schema = {"type": "struct", "fields": fields, "optional": True}
    schema = {
        "type": "struct",
        "fields": [row_schema | {"field": "before"}, row_schema | {"field": "after"}],
    }
    payload = {
        "before": None,
        "after": after,
        "source": {"schema": "public", "table": table, "snapshot": "false"},
        "op": op,
    }
    key = {"schema": {"type": "struct", "fields": [FIELDS[0]]}, "payload": {"id": 7}}
    value = {"schema": schema, "payload": payload}
    dump = lambda x: json.dumps(x, separators=(",", ":")).encode()  # noqa: E731
    return dump(key), dump(value)


def test_every_mapped_type_becomes_its_postgres_value():
    change = DebeziumMounter().mount(*event("u", ROW), commit_ts=5)
    assert change is not None
    assert (change.table, change.op, change.key, change.commit_ts) == ("things", "upsert", (7,), 5)
    v = change.values
    assert v["amount"] == Decimal("-10.50")
    assert v["raw"] == b"\x00\xff"
    assert v["day"] == dt.date(2022, 1, 8)
    assert v["tod"] == dt.time(1, 2, 3, 4)
    assert v["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert v["tz"] == dt.datetime(2026, 11, 27, 10, 0, 0, 500000, tzinfo=dt.UTC)
    assert v["ref"] == uuid.UUID("2c078ecc-4ae6-413d-99e0-74fe9986ae8d")
    assert (v["doc"], v["mood"], v["name"]) == ('{"a": 1}', "happy", 'a "quoted" name')
    types = {c.name: PG_TYPES[c.type] for c in change.columns}
    assert types["small"] == "smallint" and types["f4"] == "real" and types["amount"] == "numeric"
    assert types["tz"] == "timestamp with time zone" and types["doc"] == "jsonb"
    assert [c.name for c in change.columns if c.primary_key] == ["id"]


def test_delete_truncate_and_what_has_nothing_to_apply():
    mounter = DebeziumMounter()
    deleted = mounter.mount(*event("d", None), commit_ts=6)
    assert deleted is not None and (deleted.op, deleted.key) == ("delete", (7,))
    truncated = mounter.mount(*event("t", None), commit_ts=6)
    assert truncated is not None and truncated.op == "truncate"
    key, _ = event("c", ROW)
    assert mounter.mount(key, None, commit_ts=6) is None  # a tombstone
    assert mounter.mount(*event("m", None), commit_ts=6) is None  # a logical message


def test_a_new_column_comes_with_the_events_that_carry_it():
    mounter = DebeziumMounter()
    before = mounter.mount(*event("c", {"id": 7}, fields=FIELDS[:1]), commit_ts=1)
    after = mounter.mount(
        *event(
            "c", {"id": 7, "note": "x"}, fields=[*FIELDS[:1], {"type": "string", "field": "note"}]
        ),
        commit_ts=2,
    )
    assert before is not None and after is not None
    assert [c.name for c in after.columns] == ["id", "note"]
    assert after.schema_version != before.schema_version


@pytest.mark.parametrize(
    ("fields", "row", "error_class"),
    [
        (
            [*FIELDS[:1], {"type": "array", "field": "tags"}],
            {"id": 7, "tags": [1]},
            "UnmappableType",
        ),
        (
            [*FIELDS[:1], {"type": "string", "name": "io.debezium.data.Uuid", "field": "u"}],
            {"id": 7, "u": "not-a-uuid"},
            "BadValue",
        ),
    ],
)
def test_what_cannot_be_mapped_is_a_misfit_naming_the_column(fields, row, error_class):
    with pytest.raises(Misfit) as err:
        DebeziumMounter().mount(*event("c", row, fields=fields), commit_ts=1)
    assert err.value.error_class == error_class
    assert ("tags" if error_class == "UnmappableType" else "'u'") in str(err.value)


def test_a_value_that_is_not_a_debezium_event_is_a_misfit():
    with pytest.raises(Misfit) as err:
        DebeziumMounter().mount(b'{"id":1}', b"garbage", commit_ts=1)
    assert err.value.error_class == "UndecodableValue"
    with pytest.raises(Misfit) as err:
        DebeziumMounter().mount(b"{}", b'{"schema":{},"payload":{"x":1}}', commit_ts=1)
    assert err.value.error_class == "NotDebezium"


def test_special_floats_and_64_bit_integers_come_through_exactly():
    """Jackson may write NaN and Infinity for a float column (orjson refuses them); int64
    values at their bounds keep every digit."""
    key, value = event("u", ROW | {"big": 2**63 - 1, "small": -(2**15)})
    value = value.replace(b'"f4":1.5', b'"f4":NaN').replace(b'"f8":2.25', b'"f8":-Infinity')
    change = DebeziumMounter().mount(key, value, commit_ts=5)
    assert change is not None
    v = change.values
    assert v["big"] == 2**63 - 1 and v["small"] == -(2**15)
    assert math.isnan(v["f4"]) and v["f8"] == -math.inf


def test_a_change_kept_by_reference_mounts_as_its_whole_value_does():
    """The puller keeps the schema out of the value (wire/debezium.py); the sink mounts the
    payload with the schema looked up by id, once per id, and gets the same row change."""
    key, value = event("u", ROW)
    split = EnvelopeSplitter().split(value)
    assert split is not None
    sid, schema, payload = split
    asked: list[bytes] = []

    def schemas(wanted: bytes) -> bytes:
        asked.append(wanted)
        return schema

    mounter = DebeziumMounter(schemas)
    whole = DebeziumMounter().mount(key, value, commit_ts=5)
    assert mounter.mount(key, payload, commit_ts=5, schema_id=sid) == whole
    assert mounter.mount(key, payload, commit_ts=5, schema_id=sid) == whole
    assert asked == [sid]


def test_a_schema_not_found_is_asked_again_and_one_not_json_is_a_misfit():
    key, value = event("c", ROW)
    split = EnvelopeSplitter().split(value)
    assert split is not None
    sid, schema, payload = split
    held: dict[bytes, bytes] = {}

    def schemas(wanted: bytes) -> bytes:
        if wanted not in held:
            raise UnknownSchema(wanted.decode())
        return held[wanted]

    mounter = DebeziumMounter(schemas)
    with pytest.raises(UnknownSchema):
        mounter.mount(key, payload, commit_ts=1, schema_id=sid)
    held[sid] = schema  # nothing was cached for it: found now
    change = mounter.mount(key, payload, commit_ts=1, schema_id=sid)
    assert change is not None and change.key == (7,)
    held[b"0" * 32] = b"{not json"
    with pytest.raises(Misfit) as err:
        mounter.mount(key, payload, commit_ts=1, schema_id=b"0" * 32)
    assert err.value.error_class == "UndecodableSchema"
