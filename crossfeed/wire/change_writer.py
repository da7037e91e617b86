"""``ChangeEvent`` values written straight into Avro's binary encoding (pure, no I/O).

For the events a :class:`~crossfeed.wire.changes.Table` built, whose values it has
checked. fastavro's writer costs ~13 µs for a two-column update here, most of it per call
(walking the schema, resolving the union of every map value by trying its branches); a
change producer — the bank workload at 15k changes/s is one — spends a sizeable part of a
core on it. This writes the same bytes in ~2-3 µs: the layout of schemas/ChangeEvent.avsc
field by field. ``changes.encode_change`` uses it only after checking, once per codec,
that it gives the codec's bytes for an event with every kind of value, so a different
ChangeEvent schema (``$CROSSFEED_SCHEMAS_DIR``) falls back to fastavro; a property test
holds the two byte for byte (tests/unit/wire/test_change_writer.py).

Avro's binary encoding, as used here: int/long as zig-zag varints; string/bytes as their
length then the bytes; boolean one byte; double 8 bytes little-endian; enum and union as
the index of the symbol or branch; an array or map as one block (its count, the items)
then 0, or just 0 when empty.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Hashable, Mapping
from typing import Any, Protocol


# What this module reads of changes.py's Column and ChangeEvent: changes.py imports this
# module, so it names the fields it needs rather than importing the classes back.
class Column(Hashable, Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def primary_key(self) -> bool: ...
    @property
    def nullable(self) -> bool: ...


class ChangeEvent(Protocol):
    @property
    def table(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def schema_version(self) -> int: ...
    @property
    def columns(self) -> tuple[Column, ...]: ...
    @property
    def key(self) -> Mapping[str, Any]: ...
    @property
    def before(self) -> Mapping[str, Any] | None: ...
    @property
    def after(self) -> Mapping[str, Any] | None: ...
    @property
    def ddl(self) -> str | None: ...


# Symbol and branch orders of schemas/ChangeEvent.avsc.
_OPS = {"insert": 0, "update": 1, "delete": 2, "ddl": 3}
_COLUMN_TYPES = {"boolean": 0, "long": 1, "double": 2, "string": 3, "bytes": 4}
# A map value's union: null, boolean, long, double, string, Binary -> zig-zag of the index.
_NULL, _BOOLEAN, _LONG, _DOUBLE, _STRING, _BINARY = 0, 2, 4, 6, 8, 10
_ABSENT, _PRESENT = 0, 2  # the ["null", X] unions of before, after and ddl
_DOUBLE_BYTES = struct.Struct("<d").pack


def _long(n: int) -> bytes:
    zigzag = (n << 1) ^ (n >> 63)
    if zigzag < 0x80:
        return _BYTES[zigzag]
    if zigzag < 0x4000:  # two bytes: most counts, balances, versions
        return bytes(((zigzag & 0x7F) | 0x80, zigzag >> 7))
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_BYTES = [bytes((n,)) for n in range(0x80)]
_SMALL = [_long(n) for n in range(64)]


def _count(n: int) -> bytes:
    return _SMALL[n] if n < 64 else _long(n)


def _text(buf: bytearray, text: str) -> None:
    data = text.encode()
    buf += _count(len(data))
    buf += data


@functools.lru_cache(maxsize=4096)
def _name(text: str) -> bytes:
    """A column or table name as Avro string bytes (names repeat in every event)."""
    data = text.encode()
    return _count(len(data)) + data


def _value(buf: bytearray, value: Any) -> None:
    kind = type(value)
    if value is None:
        buf.append(_NULL)
    elif kind is bool:
        buf.append(_BOOLEAN)
        buf.append(1 if value else 0)
    elif kind is int:
        buf.append(_LONG)
        buf += _long(value)
    elif kind is float:
        buf.append(_DOUBLE)
        buf += _DOUBLE_BYTES(value)
    elif kind is str:
        buf.append(_STRING)
        _text(buf, value)
    else:  # bytes, bytearray or memoryview: a Binary record
        data = bytes(value)
        buf.append(_BINARY)
        buf += _count(len(data))
        buf += data


def _map(buf: bytearray, row: Mapping[str, Any]) -> None:
    if row:
        buf += _count(len(row))
        for name, value in row.items():
            buf += _name(name)
            if type(value) is int:  # the common case, inline
                buf.append(_LONG)
                buf += _long(value)
            else:
                _value(buf, value)
    buf.append(0)


@functools.lru_cache(maxsize=1024)
def _columns(columns: tuple[Column, ...]) -> bytes:
    """A table's column list, encoded once per shape (events of a table share it)."""
    buf = bytearray()
    if columns:
        buf += _count(len(columns))
        for c in columns:
            _text(buf, c.name)
            buf += _count(_COLUMN_TYPES[c.type])
            buf.append(1 if c.primary_key else 0)
            buf.append(1 if c.nullable else 0)
    buf.append(0)
    return bytes(buf)


def write(header: bytes, event: ChangeEvent) -> bytes:
    """``event`` as the single-object encoding that starts with ``header``."""
    buf = bytearray(header)
    buf += _name(event.table)
    buf += _SMALL[_OPS[event.op]]
    buf += _long(event.schema_version)
    buf += _columns(event.columns)
    _map(buf, event.key)
    for row in (event.before, event.after):
        if row is None:
            buf.append(_ABSENT)
        else:
            buf.append(_PRESENT)
            _map(buf, row)
    if event.ddl is None:
        buf.append(_ABSENT)
    else:
        buf.append(_PRESENT)
        _text(buf, event.ddl)
    return bytes(buf)
