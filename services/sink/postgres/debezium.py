"""The PostgreSQL sink's mounter for Debezium input: a data event (Connect's JSON converter
with schemas, or an Avro converter's record in Confluent's wire format) -> a row change.
No I/O of its own: schemas kept by reference and Avro schemas come from the callables it
is given.

The table is ``source.table`` (in the feed's target schema); the primary key is the record
key's fields; ``c``/``u``/``r`` upsert the ``after`` row, ``d`` deletes by key, ``t``
truncates (every row at or below the change's commit_ts). Column types come from the
Connect schema of each event: the schema half of the value is the same in every event of a
table version, so it is parsed once per distinct bytes and the payload alone per event. A
change kept by reference (its value the payload alone, its schema named by id, see
services/sink/schemas.py) is mounted as it is: its schema is looked up once per id.

An Avro event (crossfeed/wire/confluent_avro.py) is decoded with its value's and key's
schemas, looked up once per id in the schema registry; its Avro schema names the same
Connect types as the JSON converter's, and its values are the same but for bytes and
decimals, which Avro carries as they are (no base64). An id the registry does not know is
a Misfit (UnknownSchema).

A value that cannot be mapped — a Connect type without a PostgreSQL type here, a value that
does not decode as its type — is a Misfit: the sink sends it to the dead-letter topic with
the reason (or stops the feed with ``errors.tolerance=none``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import orjson

from crossfeed.services.sink.postgres import mapping
from crossfeed.services.sink.postgres.mapping import Column, Misfit, RowChange
from crossfeed.wire import confluent_avro
from crossfeed.wire.confluent_avro import AvroSchema

EPOCH: Final = dt.datetime(1970, 1, 1)  # naive: MicroTimestamp columns have no zone
EPOCH_DATE: Final = dt.date(1970, 1, 1)
Convert = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _bytes(value: Any) -> bytes:
    return base64.b64decode(value)


def _decimal(scale: int) -> Convert:
    def convert(value: Any) -> Decimal:
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return Decimal(unscaled).scaleb(-scale)

    return convert


def _variable_decimal(value: Any) -> Decimal:
    unscaled = int.from_bytes(base64.b64decode(value["value"]), "big", signed=True)
    return Decimal(unscaled).scaleb(-int(value["scale"]))


def _native_decimal(scale: int) -> Convert:
    """An Avro decimal: fastavro gives a Decimal for a decimal logicalType, else bytes."""

    def convert(value: Any) -> Decimal:
        if isinstance(value, Decimal):
            return value
        return Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale)

    return convert


def _native_variable_decimal(value: Any) -> Decimal:
    unscaled = int.from_bytes(value["value"], "big", signed=True)
    return Decimal(unscaled).scaleb(-int(value["scale"]))


def _date(value: Any) -> dt.date:
    return EPOCH_DATE + dt.timedelta(days=int(value))


def _time(unit_us: int) -> Convert:
    def convert(value: Any) -> dt.time:
        micros = int(value) * unit_us
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return dt.time(hour % 24, minute, second, micro)

    return convert


def _timestamp(unit_us: int) -> Convert:
    def convert(value: Any) -> dt.datetime:
        return EPOCH + dt.timedelta(microseconds=int(value) * unit_us)

    return convert


def _zoned(value: Any) -> dt.datetime:
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _uuid(value: Any) -> uuid.UUID:
    return uuid.UUID(str(value))


def _float(value: Any) -> float:
    return float(value)


# Connect logical type name -> (column type, converter); the column type is a key of
# mapping.PG_TYPES.
_LOGICAL: Final[dict[str, tuple[str, Convert]]] = {
    "io.debezium.data.VariableScaleDecimal": ("numeric", _variable_decimal),
    "io.debezium.time.Date": ("date", _date),
    "org.apache.kafka.connect.data.Date": ("date", _date),
    "io.debezium.time.MicroTime": ("time", _time(1)),
    "io.debezium.time.Time": ("time", _time(1000)),
    "io.debezium.time.NanoTime": ("time", lambda v: _time(1)(int(v) // 1000)),
    "io.debezium.time.MicroTimestamp": ("timestamp", _timestamp(1)),
    "io.debezium.time.Timestamp": ("timestamp", _timestamp(1000)),
    "io.debezium.time.ZonedTimestamp": ("timestamptz", _zoned),
    "io.debezium.data.Uuid": ("uuid", _uuid),
    "io.debezium.data.Json": ("jsonb", _identity),
    "io.debezium.data.Enum": ("string", _identity),
}
_PRIMITIVE: Final[dict[str, tuple[str, Convert]]] = {
    "int8": ("int16", _identity),
    "int16": ("int16", _identity),
    "int32": ("int32", _identity),
    "int64": ("long", _identity),
    "float32": ("float", _float),
    "float64": ("double", _float),
    "boolean": ("boolean", _identity),
    "string": ("string", _identity),
    "bytes": ("bytes", _bytes),
}


def column_type(field: dict[str, Any], *, native: bool = False) -> tuple[str, Convert]:
    """A Connect schema field's column type and value converter; Misfit if unmappable.
    ``native``: the values are Avro's (bytes as they are), not the JSON converter's."""
    name = field.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = int((field.get("parameters") or {}).get("scale", 0))
        return "numeric", _native_decimal(scale) if native else _decimal(scale)
    if native and name == "io.debezium.data.VariableScaleDecimal":
        return "numeric", _native_variable_decimal
    if native and name is None and field.get("type") == "bytes":
        return "bytes", _identity
    if name in _LOGICAL:
        return _LOGICAL[name]
    kind = field.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVE:
        return _PRIMITIVE[kind]
    shown = f"{kind}" + (f" ({name})" if name else "")
    raise Misfit(
        "UnmappableType",
        f"column {field.get('field')!r} has Connect type {shown}, which the PostgreSQL sink "
        "does not map",
    )


@dataclass(frozen=True, slots=True)
class Written:
    """A change as an active-active apply needs it (:meth:`DebeziumMounter.mount_written`)."""

    change: RowChange
    source_us: int  # the source transaction's commit time, µs (Debezium's source.ts_us)
    snapshot: bool  # a snapshot row (op r): written only where the row is absent
    insert: bool  # op c: a counter's old value is 0
    old: dict[str, Any]  # an update's old values of the columns asked for


@dataclass(frozen=True, slots=True)
class _Shape:
    """What one distinct schema half of a value means, worked out once."""

    columns: tuple[Column, ...]
    converters: dict[str, Convert]
    version: int  # a number for this shape (the sink caches per table and version)
    problem: Misfit | None = None  # the schema cannot be mapped


class DebeziumMounter:
    """Debezium data events -> row changes, caching each distinct schema. ``schemas``: a
    schema's bytes by id, for changes kept by reference."""

    def __init__(
        self,
        schemas: Callable[[bytes], bytes] | None = None,
        avro: Callable[[int], AvroSchema] | None = None,
    ) -> None:
        self._shapes: dict[tuple[bytes, bytes], _Shape] = {}
        self._schemas = schemas
        # Avro: a registered schema by id (UnknownSchemaId -> Misfit UnknownSchema here;
        # a registry that does not answer is the caller's)
        self._avro = avro

    def mount(
        self, key: bytes | None, value: bytes | None, commit_ts: int, schema_id: bytes | None = None
    ) -> RowChange | None:
        """The row change of one event (``value`` a whole JSON-converter value, or with
        ``schema_id`` the payload alone); None for one with nothing to apply (a tombstone,
        a logical decoding message); Misfit when it cannot be mapped."""
        return self._mount(key, value, commit_ts, schema_id)[0]

    def mount_written(
        self,
        key: bytes | None,
        value: bytes | None,
        commit_ts: int,
        schema_id: bytes | None,
        old_of: Mapping[str, frozenset[str]],
    ) -> Written | None:
        """:meth:`mount`, with when and how the source wrote the change (active-active):
        its commit time, whether it is a snapshot row, and the old values of the columns
        ``old_of[table]`` (an update's ``before``; Misfit NoOldValue when it lacks one)."""
        change, payload, shape = self._mount(key, value, commit_ts, schema_id)
        if change is None or payload is None or shape is None:
            return None
        source = payload["source"]
        source_us = source.get("ts_us")
        if not isinstance(source_us, int):
            source_us = int(source.get("ts_ms") or 0) * 1000
        op = payload["op"]
        old: dict[str, Any] = {}
        columns = old_of.get(change.table, frozenset())
        wanted = columns & set(change.values) if op == "u" else frozenset()
        if wanted:
            before = payload.get("before")
            missing = sorted(c for c in wanted if not isinstance(before, dict) or c not in before)
            if missing:
                raise Misfit(
                    "NoOldValue",
                    f"table {change.table}: counter column {', '.join(missing)} needs the old "
                    "value in each update: set REPLICA IDENTITY FULL on the source table",
                )
            assert isinstance(before, dict)
            for column in wanted:
                raw = before[column]
                old[column] = None if raw is None else shape.converters[column](raw)
        return Written(change, source_us, op == "r", op == "c", old)

    def _mount(
        self, key: bytes | None, value: bytes | None, commit_ts: int, schema_id: bytes | None
    ) -> tuple[RowChange | None, dict[str, Any] | None, _Shape | None]:
        """:meth:`mount`, with the event's payload and shape."""
        if value is None:
            return None, None, None
        avro_id = confluent_avro.schema_id(value) if schema_id is None else None
        if avro_id is not None:
            avro_schema = self._avro_schema(avro_id)
            schema_raw, payload = b"avro:%d" % avro_id, _decoded(avro_schema, value)
        elif schema_id is None:
            schema_raw, payload = _split(value)
        else:
            schema_raw, payload = schema_id, _payload(value)
        if payload is None:
            return None, None, None
        op = payload.get("op")
        source = payload.get("source")
        if not isinstance(source, dict) or not isinstance(op, str):
            raise Misfit(
                "NotDebezium", "the value is not a Debezium change event (no 'op' and 'source')"
            )
        table = source.get("table")
        if not isinstance(table, str) or not table:
            raise Misfit("MissingTable", "the change event's source names no table")
        if op == "m":
            return None, None, None  # a logical decoding message: no row
        if avro_id is not None:
            shape, key_payload = self._avro_shape(avro_schema, key)
        else:
            key_raw, key_payload = _split(key) if key else (b"", None)
            shape = self._shape(schema_raw, key_raw, value if schema_id is None else None, key)
        if shape.problem is not None:
            raise shape.problem
        if op == "t":
            change = RowChange(
                table, "truncate", (), {}, commit_ts, shape.columns, None, shape.version
            )
            return change, payload, shape
        key_columns = [c for c in shape.columns if c.primary_key]
        if not key_columns or not isinstance(key_payload, dict):
            raise Misfit(
                "MissingKey",
                f"table {table}: the event has no record key with the primary key "
                "(a table without a primary key needs REPLICA IDENTITY and a message.key.columns)",
            )
        convert = shape.converters
        try:
            row_key = tuple(convert[c.name](key_payload[c.name]) for c in key_columns)
        except (KeyError, TypeError, ValueError, ArithmeticError) as err:
            raise Misfit("BadKey", f"table {table}: key {key_payload!r:.120} ({err})") from None
        if op == "d":
            change = RowChange(
                table, "delete", row_key, {}, commit_ts, shape.columns, None, shape.version
            )
            return change, payload, shape
        if op not in ("c", "u", "r"):
            raise Misfit("UnknownOp", f"table {table}: op {op!r} (c, u, r, d, t or m expected)")
        after = payload.get("after")
        if not isinstance(after, dict):
            raise Misfit("MissingValues", f"table {table}: op {op!r} without 'after'")
        values: dict[str, Any] = {}
        for column in shape.columns:
            raw = after.get(column.name)
            try:
                values[column.name] = None if raw is None else convert[column.name](raw)
            except (TypeError, ValueError, ArithmeticError, KeyError) as err:
                raise Misfit(
                    "BadValue",
                    f"table {table}: column {column.name!r} ({column.type}) cannot take "
                    f"{raw!r:.60}: {err}",
                ) from None
        change = RowChange(
            table, "upsert", row_key, values, commit_ts, shape.columns, None, shape.version
        )
        return change, payload, shape

    def _avro_schema(self, sid: int) -> AvroSchema:
        if self._avro is None:
            raise Misfit(
                "NoRegistry",
                f"an Avro record (Confluent's wire format, schema id {sid}), but the feed "
                "names no schema.registry.url",
            )
        try:
            return self._avro(sid)
        except LookupError as err:  # UnknownSchemaId
            raise Misfit("UnknownSchema", str(err)) from None

    def _avro_shape(self, value: AvroSchema, key: bytes | None) -> tuple[_Shape, Any]:
        """The shape of an Avro event's value and key schemas, and its decoded key."""
        key_id = confluent_avro.schema_id(key)
        if key and key_id is None:
            raise Misfit("NotDebezium", "an Avro value whose key is not in Confluent's format")
        key_schema = self._avro_schema(key_id) if key_id is not None else None
        key_payload = _decoded(key_schema, key) if key_schema is not None and key else None
        cache_key = (b"avro:%d" % value.id, b"avro:%d" % (key_id or 0))
        found = self._shapes.get(cache_key)
        if found is None:
            try:
                found = _make_avro_shape(value, key_schema, len(self._shapes) + 1)
            except Misfit as err:
                found = _Shape((), {}, 0, err)
            if len(self._shapes) > 10_000:
                self._shapes.clear()
            self._shapes[cache_key] = found
        if found.problem is not None:
            raise found.problem
        return found, key_payload

    def _shape(
        self, schema_raw: bytes, key_raw: bytes, value: bytes | None, key: bytes | None
    ) -> _Shape:
        """The shape of a schema (``schema_raw``: its bytes, or its id when ``value`` is
        None) and key schema; worked out on first sight."""
        found = self._shapes.get((schema_raw, key_raw))
        if found is not None:
            return found
        if value is None:
            assert self._schemas is not None, "a schema by id needs the feed's schemas"
            # UnknownSchema, SchemasUnreadable: the caller's, and nothing is cached
            document = self._schemas(schema_raw)
        else:
            document = value
        try:
            decoded = json.loads(document)
            if value is not None:
                decoded = decoded.get("schema")
            if not isinstance(decoded, dict):
                raise Misfit("NotDebezium", "the event's Connect schema is not an object")
            shape = _make_shape(decoded, key, len(self._shapes) + 1)
        except Misfit as err:  # a ValueError too: before the clause below
            shape = _Shape((), {}, 0, err)
        except ValueError as err:
            shape = _Shape((), {}, 0, Misfit("UndecodableSchema", f"schema not JSON: {err}"))
        if len(self._shapes) > 10_000:
            self._shapes.clear()
        self._shapes[(schema_raw, key_raw)] = shape
        return shape


def _decoded(schema: AvroSchema, raw: bytes) -> Any:
    """An Avro record's value under ``schema``; Misfit if it does not decode as one."""
    try:
        return schema.decode(raw)
    except ValueError as err:
        raise Misfit("UndecodableValue", str(err)) from None


def _make_avro_shape(value: AvroSchema, key: AvroSchema | None, version: int) -> _Shape:
    try:
        fields = confluent_avro.row_fields(value.document)
    except ValueError as err:
        raise Misfit("NotDebezium", f"schema {value.id}: {err}") from None
    key_names = confluent_avro.field_names(key.document) if key is not None else []
    columns = []
    converters: dict[str, Convert] = {}
    for field in fields:
        name = str(field["field"])
        kind, convert = column_type(field, native=True)
        columns.append(Column(name, kind, name in key_names, bool(field["optional"])))
        converters[name] = convert
    return _Shape(tuple(columns), converters, version)


def _split(raw: bytes) -> tuple[bytes, dict[str, Any] | None]:
    """(the schema half's bytes, the decoded payload) of a JSON-converter record. The
    converter writes ``{"schema":...,"payload":...}``; ``"payload":`` cannot occur inside
    the schema half (field names there are values of ``"field"``), so the first one splits."""
    cut = raw.find(b',"payload":') if raw.startswith(b'{"schema":') else -1
    try:
        if cut < 0:
            decoded = json.loads(raw)
            if isinstance(decoded, dict) and "payload" in decoded:
                return json.dumps(decoded.get("schema")).encode(), decoded["payload"]
            if isinstance(decoded, dict) and "op" in decoded:
                raise Misfit(
                    "NoSchema",
                    "the event carries no Connect schema: the JSON converter must run with "
                    "schemas.enable=true",
                )
            raise Misfit("NotDebezium", "the value is not a Debezium change event")
        payload = _loads(raw[cut + len(b',"payload":') : -1])
    except (ValueError, UnicodeDecodeError) as err:
        raise Misfit("UndecodableValue", f"not JSON: {err}") from None
    if payload is not None and not isinstance(payload, dict):
        raise Misfit("NotDebezium", "the payload is not an object")
    return raw[:cut], payload


def _payload(raw: bytes) -> dict[str, Any] | None:
    """The decoded payload of a change kept by reference (its value the payload alone)."""
    try:
        payload = _loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise Misfit("UndecodableValue", f"not JSON: {err}") from None
    if payload is not None and not isinstance(payload, dict):
        raise Misfit("NotDebezium", "the payload is not an object")
    return payload


def _loads(data: bytes) -> Any:
    """A payload: orjson (~4x faster than json on Debezium's events), and json for what
    orjson refuses but Connect's converter may write (NaN, Infinity)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _make_shape(schema: dict[str, Any], key: bytes | None, version: int) -> _Shape:
    fields = {f.get("field"): f for f in schema.get("fields") or ()}
    row = fields.get("after") or fields.get("before")
    if row is None:
        raise Misfit("NotDebezium", "the event's schema has no 'before' or 'after' struct")
    key_names: list[str] = []
    if key:
        key_schema = json.loads(key).get("schema") or {}
        key_names = [str(f.get("field")) for f in key_schema.get("fields") or ()]
    columns = []
    converters: dict[str, Convert] = {}
    for field in row.get("fields") or ():
        name = str(field.get("field"))
        if name == mapping.COMMIT_TS_COLUMN:
            # a sink's bookkeeping in a database that was a target before (a reverse feed
            # after a switchover): never replicated, each target keeps its own
            continue
        kind, convert = column_type(field)
        columns.append(Column(name, kind, name in key_names, bool(field.get("optional", True))))
        converters[name] = convert
    return _Shape(tuple(columns), converters, version)
