"""Records in Confluent's wire format, as Debezium writes them through an Avro converter
with a schema registry (Apicurio's with ``as-confluent``, or Confluent's own), and what the
PostgreSQL sink needs of their Avro schemas. No I/O: the schemas come from the caller
(crossfeed/cdc/registry.py fetches them).

The format: byte 0 is the magic byte ``0``, bytes 1-4 the schema's id in the registry
(big-endian), the rest the Avro binary encoding of the value under that schema. A JSON
converter's value starts with ``{``, so the first byte tells the two formats apart.

Connect's Avro converter writes a Connect schema as an Avro schema and keeps what Avro has
no word for in properties of each type: ``connect.name`` (the logical type, e.g.
``io.debezium.time.Date``), ``connect.type`` (``int8``/``int16``, written as Avro ints) and
``connect.parameters`` (a Decimal's scale); an optional field is a union with ``null``.
:func:`row_fields` turns the row struct of an envelope back into the Connect fields the
JSON converter would have shown (``{"field", "type", "name", "parameters", "optional"}``),
so both formats map columns by one table (services/sink/postgres/debezium.py).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Final

import fastavro

MAGIC: Final = 0
HEADER_BYTES: Final = 5
# Avro primitive -> Connect type (ints narrowed by connect.type)
_CONNECT_TYPES: Final = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "record": "struct",
    "array": "array",
    "map": "map",
    "enum": "string",
    "fixed": "bytes",
}


def schema_id(value: bytes | None) -> int | None:
    """The registry id of a record in Confluent's wire format; None for any other value."""
    if value is None or len(value) < HEADER_BYTES or value[0] != MAGIC:
        return None
    return int.from_bytes(value[1:HEADER_BYTES], "big")


@dataclass(frozen=True, slots=True)
class AvroSchema:
    """One registered Avro schema: as the registry gave it, and parsed for decoding."""

    id: int
    document: dict[str, Any]
    parsed: Any

    @classmethod
    def of(cls, sid: int, text: str) -> AvroSchema:
        """``text``: the schema's JSON; ValueError if it is not an Avro schema."""
        try:
            document = json.loads(text)
            parsed = fastavro.parse_schema(document)
        except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as err:
            raise ValueError(f"schema {sid} is not an Avro schema: {err}") from None
        if not isinstance(document, dict):
            raise ValueError(f"schema {sid} is not an Avro record schema")
        return cls(sid, document, parsed)

    def decode(self, value: bytes) -> Any:
        """The value of a record in Confluent's wire format under this schema; ValueError
        if its body does not decode."""
        try:
            return fastavro.schemaless_reader(
                io.BytesIO(memoryview(value)[HEADER_BYTES:]), self.parsed, None
            )
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError) as err:
            raise ValueError(f"not Avro of schema {self.id}: {err}") from None


def field_names(document: dict[str, Any]) -> list[str]:
    """The fields of a record schema (a key's: the primary key's columns)."""
    return [str(f.get("name")) for f in document.get("fields") or ()]


def row_fields(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """The Connect fields of a Debezium envelope's row struct (``before``/``after``);
    ValueError if the schema is not an envelope's."""
    fields = {f.get("name"): f for f in envelope.get("fields") or ()}
    row = None
    for name in ("before", "after"):
        found = _record(fields.get(name, {}).get("type"))
        if found is not None:
            row = found
            break
    if row is None:
        raise ValueError("the schema has no 'before' or 'after' record")
    return [connect_field(f) for f in row.get("fields") or ()]


def _record(kind: Any) -> dict[str, Any] | None:
    """The record definition in a field's type (alone or in a union)."""
    for branch in kind if isinstance(kind, list) else [kind]:
        if isinstance(branch, dict) and branch.get("type") == "record":
            return branch
    return None


def connect_field(field: dict[str, Any]) -> dict[str, Any]:
    """The Connect field the converter wrote as this Avro field."""
    kind = field.get("type")
    optional = False
    if isinstance(kind, list):
        branches = [b for b in kind if b != "null"]
        optional = len(branches) < len(kind)
        kind = branches[0] if len(branches) == 1 else {"type": "union"}
    props: dict[str, Any] = kind if isinstance(kind, dict) else {"type": kind}
    avro_type = props.get("type")
    if isinstance(avro_type, dict):  # {"type": {"type": "long", ...}}
        props, avro_type = avro_type, avro_type.get("type")
    connect_type = props.get("connect.type") or _CONNECT_TYPES.get(str(avro_type), avro_type)
    return {
        "field": field.get("name"),
        "type": connect_type,
        "name": props.get("connect.name"),
        "parameters": props.get("connect.parameters") or {},
        "optional": optional,
    }
