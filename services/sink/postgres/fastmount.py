"""The mounter's fast path: a ChangeEvent's bytes straight to a row change (no I/O).

fastavro decodes a whole ChangeEvent into dicts, the table's column list included (a
list of four-field records, the same in every change of a table), and the mounter then
walks those dicts again: together about half of the sink's CPU per row change. This
reads the single-object bytes of the *current* ChangeEvent schema by hand instead: the
column list is compared as bytes with the one seen last for (table, schema_version) and
decoded only when it differs; a value's union branch says its type, so the type checks
are a set lookup; values go straight into the row change.

It only ever takes the plain case. Anything else — another writer schema, a ddl change,
any check of :func:`mapping.mount` that would fail, bytes that do not parse, trailing
bytes — gives None, and the sink decodes the value the ordinary way (codec + mount),
which says exactly what is wrong. So a value the fast path accepts gives the very row
change the ordinary path would (tests/unit/sink/postgres/test_fastmount.py checks that
on generated and corrupted values).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from crossfeed.services.sink.postgres.mapping import Column, RowChange

CHANGE_EVENT_FINGERPRINT: Final = 0x4165576EC057E66B
"""CRC-64-AVRO fingerprint of the ChangeEvent schema this decoder reads; any other
schema (a new version, ``$CROSSFEED_SCHEMAS_DIR``) turns the fast path off."""

_OPS: Final = ("upsert", "upsert", "delete")  # ChangeOp insert, update, delete (ddl: slow)
_COLUMN_TYPES: Final = ("boolean", "long", "double", "string", "bytes")
# A value's union branch as its one varint byte (2 x index: null 0, boolean 2, long 4,
# double 6, string 8, Binary 10), and the branches that fit a column of each type (not
# null: nullability is checked apart), as mapping._fits has it.
_FITS: Final = {
    "boolean": frozenset((2,)),
    "long": frozenset((4,)),
    "double": frozenset((4, 6)),
    "string": frozenset((8,)),
    "bytes": frozenset((10,)),
}
_NONE: Final[dict[str, tuple[frozenset[int], bool]]] = {}
_DOUBLE = struct.Struct("<d")
_MAX_LONG = 2**63


class _Malformed(Exception):
    """The bytes do not parse here (the ordinary path will say why, or read them)."""


class _Misfit(Exception):
    """A value breaks a check of mapping.mount (the ordinary path will say which)."""


class _Table:
    """What a (table, schema_version)'s column list means, decoded once."""

    __slots__ = ("by_name", "columns", "key", "key_rules", "raw", "table", "version")

    def __init__(self, table: str, version: int, raw: bytes, columns: tuple[Column, ...]) -> None:
        self.table = table
        self.version = version
        self.raw = raw  # the column list's bytes, compared to tell a hit
        self.columns = columns
        # name -> (fitting branches, may be null): for the values, and for the key
        self.by_name = {c.name: (_FITS[c.type], not c.primary_key and c.nullable) for c in columns}
        self.key = tuple(c.name for c in columns if c.primary_key)
        self.key_rules = {c.name: (_FITS[c.type], False) for c in columns if c.primary_key}


class FastMounter:
    def __init__(self, fingerprint: int) -> None:
        # Off (never matches: a header is 10 bytes) unless the current schema is the one
        # this decoder reads.
        self.header = (
            b"\xc3\x01" + fingerprint.to_bytes(8, "little")
            if fingerprint == CHANGE_EVENT_FINGERPRINT
            else b"off"
        )
        self._tables: dict[tuple[bytes, int], _Table] = {}
        self._last: tuple[bytes, _Table, int] | None = None  # head bytes, table, op

    @property
    def enabled(self) -> bool:
        return len(self.header) == 10

    def mount(self, data: bytes, commit_ts: int) -> RowChange | None:
        """The row change of ``data``, or None: decode it the ordinary way."""
        if not data.startswith(self.header):
            return None
        try:
            return self._mount(data, commit_ts)
        except (_Malformed, _Misfit, KeyError, IndexError, UnicodeDecodeError, struct.error):
            return None

    def _mount(self, data: bytes, commit_ts: int) -> RowChange | None:
        end = len(data)
        # The head (table, op, schema_version, column list) is the same in most changes
        # in a row: one comparison of bytes with the last one skips reading it.
        last = self._last
        if last is not None and data.startswith(last[0], 10):
            known, op = last[1], last[2]
            pos = 10 + len(last[0])
        else:
            n, pos = _long(data, 10)
            table_raw = data[pos : pos + n]
            pos += n
            op, pos = _long(data, pos)
            version, pos = _long(data, pos)
            if not (0 <= op <= 2 and n and pos <= end and -(2**31) <= version < 2**31):
                return None  # ddl, a bad enum, no table name: the ordinary path
            found = self._tables.get((table_raw, version))
            if found is not None and data.startswith(found.raw, pos):
                pos += len(found.raw)
                known = found
            else:
                known, pos = self._columns(data, pos, table_raw, version)
            if not known.key:
                return None
            self._last = (data[10:pos], known, op)
        # the key: its columns' values, the right type, not null (other entries are
        # ignored, as mapping.mount does)
        raw_key, pos = _map(data, pos, known.key_rules, False)
        names = known.key
        key = (raw_key[names[0]],) if len(names) == 1 else tuple(map(raw_key.__getitem__, names))
        # before (read for its validity only), after, ddl: unions whose index is one byte
        before = data[pos]
        pos += 1
        if before == 2:
            _, pos = _map(data, pos, _NONE, False)
        elif before != 0:
            return None
        has_after = data[pos]
        pos += 1
        values: dict[str, Any] | None = None
        if has_after == 2:
            values, pos = _map(data, pos, known.by_name if op != 2 else _NONE, op != 2)
        elif has_after != 0:
            return None
        ddl = data[pos]
        pos += 1
        if ddl == 2:
            n, pos = _long(data, pos)
            _text(data, pos, n)
            pos += n
        elif ddl != 0:
            return None
        if pos != end:
            return None  # trailing bytes: the codec refuses them
        if op == 2:
            return RowChange(
                known.table, "delete", key, {}, commit_ts, known.columns, None, known.version
            )
        if values is None:
            return None
        for i, name in enumerate(names):  # the key's columns, filled in when absent
            if values.setdefault(name, key[i]) != key[i]:
                return None
        return RowChange(
            known.table, "upsert", key, values, commit_ts, known.columns, None, known.version
        )

    def _columns(self, data: bytes, pos: int, table_raw: bytes, version: int) -> tuple[_Table, int]:
        start = pos
        columns = []
        while True:
            count, pos = _long(data, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = _long(data, pos)  # the block's size in bytes
            for _ in range(count):
                n, pos = _long(data, pos)
                name = _text(data, pos, n)
                pos += n
                kind, pos = _long(data, pos)
                if not 0 <= kind < len(_COLUMN_TYPES):
                    raise _Malformed
                primary_key, pos = _bool(data, pos)
                nullable, pos = _bool(data, pos)
                columns.append(Column(name, _COLUMN_TYPES[kind], primary_key, nullable))
        known = _Table(table_raw.decode(), version, data[start:pos], tuple(columns))
        if len(self._tables) > 10_000:
            self._tables.clear()
        self._tables[(table_raw, version)] = known
        return known, pos


def _long(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro int/long (zigzag varint) at ``pos``; (value, position after it)."""
    byte = data[pos]
    pos += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos
    value = byte & 0x7F
    shift = 7
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise _Malformed
    if value >= 2 * _MAX_LONG:
        raise _Malformed
    return (value >> 1) ^ -(value & 1), pos


def _bool(data: bytes, pos: int) -> tuple[bool, int]:
    byte = data[pos]
    if byte > 1:
        raise _Malformed
    return byte == 1, pos + 1


def _text(data: bytes, pos: int, n: int) -> str:
    if n < 0 or pos + n > len(data):
        raise _Malformed
    return data[pos : pos + n].decode()


def _map(
    data: bytes, pos: int, rules: dict[str, tuple[frozenset[int], bool]], strict: bool
) -> tuple[dict[str, Any], int]:
    """A map of column values: name -> Python value as mapping gives it (a Binary is its
    bytes). Each value is checked against ``rules`` (name -> (fitting branches, may be
    null)): _Misfit when it breaks one, or names a column without one when ``strict``.
    One-byte varints (lengths < 64, small longs) are read inline, each where it is
    needed (a helper's call costs more than the read): this loop is most of the fast
    path's time."""
    out: dict[str, Any] = {}
    end = len(data)
    while True:
        count = data[pos]
        if count < 0x80:
            count = (count >> 1) ^ -(count & 1)
            pos += 1
        else:
            count, pos = _long(data, pos)
        if count == 0:
            return out, pos
        if count < 0:
            count = -count
            _, pos = _long(data, pos)
        for _ in range(count):
            n = data[pos]
            if n < 0x80:
                n = (n >> 1) ^ -(n & 1)
                pos += 1
            else:
                n, pos = _long(data, pos)
            if n < 0 or pos + n > end:
                raise _Malformed
            name = data[pos : pos + n].decode()
            pos += n
            branch = data[pos]  # a union index < 64 is one varint byte: 2 * index
            pos += 1
            value: Any
            if branch == 4:  # long (one or two varint bytes inline: |value| < 8192)
                value = data[pos]
                if value < 0x80:
                    value = (value >> 1) ^ -(value & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:
                    value = (value & 0x7F) | (data[pos + 1] << 7)
                    value = (value >> 1) ^ -(value & 1)
                    pos += 2
                else:
                    value, pos = _long(data, pos)
            elif branch == 8:  # string
                n = data[pos]
                if n < 0x80:
                    n = (n >> 1) ^ -(n & 1)
                    pos += 1
                else:
                    n, pos = _long(data, pos)
                if n < 0 or pos + n > end:
                    raise _Malformed
                value = data[pos : pos + n].decode()
                pos += n
            elif branch == 0:  # null
                value = None
            elif branch == 6:  # double
                (value,) = _DOUBLE.unpack_from(data, pos)
                pos += 8
            elif branch == 2:  # boolean
                value, pos = _bool(data, pos)
            elif branch == 10:  # Binary
                n, pos = _long(data, pos)
                if n < 0 or pos + n > end:
                    raise _Malformed
                value = data[pos : pos + n]
                pos += n
            else:
                raise _Malformed
            rule = rules.get(name)
            if rule is None:
                if strict:
                    raise _Misfit
            elif branch not in rule[0] and (branch or not rule[1]):
                raise _Misfit
            out[name] = value
