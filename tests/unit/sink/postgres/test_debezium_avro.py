"""services/sink/postgres/debezium.py with Avro events (Confluent's wire format): the same
row changes as from the JSON converter's events of the same rows."""

from __future__ import annotations

import base64
import io
import json
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from crossfeed.cdc.registry import UnknownSchemaId
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.mapping import Misfit
from crossfeed.wire import debezium
from crossfeed.wire.confluent_avro import AvroSchema
from tests.unit.sink.postgres.test_debezium import FIELDS, ROW, event

pytestmark = pytest.mark.unit


def _logical(avro_type: str, name: str, **props: Any) -> dict[str, Any]:
    return {"type": avro_type, "connect.version": 1, "connect.name": name, **props}


# The row struct of FIELDS as Connect's Avro converter writes it (the shapes seen from
# Apicurio's converter on Debezium 3.7: optional fields are unions with null).
AVRO_TYPES: dict[str, Any] = {
    "id": "int",
    "small": {"type": "int", "connect.type": "int16"},
    "big": "long",
    "f4": "float",
    "f8": "double",
    "flag": "boolean",
    "name": "string",
    "raw": "bytes",
    "amount": _logical(
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        scale=2,
        precision=12,
        logicalType="decimal",
        **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "12"}},
    ),
    "day": _logical("int", "io.debezium.time.Date"),
    "tod": _logical("long", "io.debezium.time.MicroTime"),
    "ts": _logical("long", "io.debezium.time.MicroTimestamp"),
    "tz": _logical("string", "io.debezium.time.ZonedTimestamp"),
    "ref": _logical("string", "io.debezium.data.Uuid"),
    "doc": _logical("string", "io.debezium.data.Json"),
    "mood": _logical("string", "io.debezium.data.Enum"),
}
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "snapshot", "type": [_logical("string", "io.debezium.data.Enum"), "null"]},
    ],
}


def _field(name: str, kind: Any, optional: bool) -> dict[str, Any]:
    return (
        {"name": name, "type": ["null", kind], "default": None}
        if optional
        else {
            "name": name,
            "type": kind,
        }
    )


def envelope(types: dict[str, Any]) -> dict[str, Any]:
    row = {
        "type": "record",
        "name": "Value",
        "fields": [_field(n, t, n != "id") for n, t in types.items()],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "pg1.public.things",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": SOURCE},
            {"name": "op", "type": "string"},
        ],
    }


KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}


def wire(sid: int, schema: dict[str, Any], record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + sid.to_bytes(4, "big") + out.getvalue()


class Registry:
    """Schemas by id, as the registry client hands them over."""

    def __init__(self, **schemas: dict[str, Any]) -> None:
        self.schemas = {
            int(k[1:]): AvroSchema.of(int(k[1:]), json.dumps(v)) for k, v in schemas.items()
        }
        self.asked: list[int] = []

    def __call__(self, sid: int) -> AvroSchema:
        self.asked.append(sid)
        if sid not in self.schemas:
            raise UnknownSchemaId(f"schema id {sid} is not in the schema registry")
        return self.schemas[sid]


def avro_row(row: dict[str, Any]) -> dict[str, Any]:
    """ROW as Avro carries it: bytes and decimals as they are, not base64."""
    out = dict(row)
    out["raw"] = base64.b64decode(row["raw"])
    out["amount"] = Decimal("-10.50")
    return out


def avro_event(op: str, after: dict[str, Any] | None, sid: int = 2) -> tuple[bytes, bytes]:
    value = {
        "before": None,
        "after": after,
        "source": {"schema": "public", "table": "things", "snapshot": "false"},
        "op": op,
    }
    return wire(1, KEY, {"id": 7}), wire(sid, envelope(AVRO_TYPES), value)


def test_every_mapped_type_arrives_as_from_the_json_converter():
    registry = Registry(k1=KEY, k2=envelope(AVRO_TYPES))
    mounter = DebeziumMounter(avro=registry)
    from_avro = mounter.mount(*avro_event("u", avro_row(ROW)), commit_ts=5)
    from_json = DebeziumMounter().mount(*event("u", ROW), commit_ts=5)
    assert from_avro is not None and from_json is not None
    assert from_avro.values == from_json.values
    assert (from_avro.table, from_avro.op, from_avro.key) == ("things", "upsert", (7,))
    assert [(c.name, c.type, c.primary_key, c.nullable) for c in from_avro.columns] == [
        (c.name, c.type, c.primary_key, c.nullable) for c in from_json.columns
    ]
    assert [f["field"] for f in FIELDS] == [c.name for c in from_avro.columns]
    # each schema is asked for once, whatever the number of events
    for _ in range(3):
        mounter.mount(*avro_event("u", avro_row(ROW)), commit_ts=6)
    assert sorted(set(registry.asked)) == [1, 2]
    deleted = mounter.mount(*avro_event("d", None), commit_ts=7)
    assert deleted is not None and (deleted.op, deleted.key) == ("delete", (7,))


def test_a_new_schema_version_brings_its_column():
    wider = AVRO_TYPES | {"note": "string"}
    registry = Registry(k1=KEY, k2=envelope(AVRO_TYPES), k3=envelope(wider))
    mounter = DebeziumMounter(avro=registry)
    old = mounter.mount(*avro_event("c", avro_row(ROW)), commit_ts=1)
    key, _ = avro_event("c", None)
    value = {
        "before": None,
        "after": avro_row(ROW) | {"note": "hi"},
        "source": {"schema": "public", "table": "things", "snapshot": "false"},
        "op": "c",
    }
    new = mounter.mount(key, wire(3, envelope(wider), value), commit_ts=2)
    assert old is not None and new is not None
    assert new.values["note"] == "hi" and "note" not in old.values
    assert new.schema_version != old.schema_version


def test_an_unknown_id_an_undecodable_body_and_no_registry_are_misfits():
    registry = Registry(k1=KEY, k2=envelope(AVRO_TYPES))
    key, value = avro_event("c", avro_row(ROW), sid=99)
    with pytest.raises(Misfit) as err:
        DebeziumMounter(avro=registry).mount(key, value, commit_ts=1)
    assert err.value.error_class == "UnknownSchema" and "99" in str(err.value)
    key, value = avro_event("c", avro_row(ROW))
    with pytest.raises(Misfit) as err:
        DebeziumMounter(avro=registry).mount(key, value[:12], commit_ts=1)
    assert err.value.error_class == "UndecodableValue"
    with pytest.raises(Misfit) as err:
        DebeziumMounter().mount(key, value, commit_ts=1)
    assert err.value.error_class == "NoRegistry"


def test_an_array_column_is_unmappable_as_in_json():
    registry = Registry(
        k1=KEY, k2=envelope(AVRO_TYPES | {"tags": {"type": "array", "items": "int"}})
    )
    value = {
        "before": None,
        "after": avro_row(ROW) | {"tags": [1, 2]},
        "source": {"schema": "public", "table": "things", "snapshot": "false"},
        "op": "c",
    }
    key, _ = avro_event("c", None)
    with pytest.raises(Misfit) as err:
        DebeziumMounter(avro=registry).mount(
            key, wire(2, registry.schemas[2].document, value), commit_ts=1
        )
    assert err.value.error_class == "UnmappableType" and "tags" in str(err.value)


def test_the_ordering_facts_of_an_avro_event_are_those_of_the_json_one():
    payload = {
        "before": None,
        "after": {"id": 1},
        "source": {"snapshot": "last", "origin": None},
        "op": "r",
        "transaction": None,
    }
    assert debezium.data_event_of(payload) == debezium.DataEvent(None, snapshot="last")
    streamed = payload | {
        "source": {"snapshot": "false", "origin": "crossfeed:x"},
        "op": "c",
        "transaction": {"id": "771:2345", "total_order": 3, "data_collection_order": 2},
    }
    assert debezium.data_event_of(streamed) == debezium.DataEvent("771", 3, 2, None, "crossfeed:x")
    end = {
        "status": "END",
        "id": "771:9000",
        "event_count": 4,
        "data_collections": [{"data_collection": "public.a", "event_count": 4}],
        "ts_ms": 1000,
    }
    assert debezium.txn_record_of(end) == debezium.TxnEnd(
        "771", 9000, 4, (("public.a", 4),), 1_000_000
    )
    assert debezium.txn_record_of({"status": "BEGIN", "id": "771:1"}) is None
    assert debezium.heartbeat_ts_us_of({"ts_ms": 5}) == 5000
    with pytest.raises(debezium.NotDebezium):
        debezium.data_event_of([1, 2])
