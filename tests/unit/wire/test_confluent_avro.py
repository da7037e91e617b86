"""crossfeed/wire/confluent_avro.py: Confluent's wire format and Connect's Avro schemas."""

from __future__ import annotations

import pytest

from crossfeed.wire.confluent_avro import AvroSchema, connect_field, row_fields, schema_id

pytestmark = pytest.mark.unit


def test_the_first_byte_tells_the_formats_apart():
    assert schema_id(b"\x00\x00\x00\x01\x02body") == 258
    assert schema_id(b'{"schema":{},"payload":{}}') is None
    assert schema_id(b"\x00\x00\x01") is None  # too short for a header
    assert schema_id(None) is None


def test_connect_types_come_back_from_the_avro_schema():
    assert connect_field({"name": "a", "type": "long"}) == {
        "field": "a",
        "type": "int64",
        "name": None,
        "parameters": {},
        "optional": False,
    }
    small = connect_field({"name": "s", "type": ["null", {"type": "int", "connect.type": "int16"}]})
    assert (small["type"], small["optional"]) == ("int16", True)
    dec = connect_field(
        {
            "name": "d",
            "type": {
                "type": "bytes",
                "connect.name": "org.apache.kafka.connect.data.Decimal",
                "connect.parameters": {"scale": "3"},
            },
        }
    )
    assert (dec["type"], dec["name"], dec["parameters"]) == (
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        {"scale": "3"},
    )
    assert (
        connect_field({"name": "t", "type": {"type": "array", "items": "int"}})["type"] == "array"
    )


def test_what_is_not_an_envelope_or_not_avro_is_refused():
    with pytest.raises(ValueError, match="before"):
        row_fields({"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]})
    with pytest.raises(ValueError, match="not an Avro schema"):
        AvroSchema.of(5, '{"type": "nonsense"}')
    with pytest.raises(ValueError, match="not an Avro schema"):
        AvroSchema.of(5, "not json")
    schema = AvroSchema.of(
        6, '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}'
    )
    assert schema.decode(b"\x00\x00\x00\x00\x06\x02") == {"a": 1}
    with pytest.raises(ValueError, match="not Avro of schema 6"):
        schema.decode(b"\x00\x00\x00\x00\x06")
