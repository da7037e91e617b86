"""Row changes of ordered feeds: the ``ChangeEvent`` value and the ``crossfeed-txn`` header.

docs/ordered-feeds.md is the contract. This module is pure (no I/O): the change producer
builds values and headers with it, the sinks and the tests read them back.

Values: :class:`Table` builds ``ChangeEvent`` records (insert, update, delete, ddl) from
plain Python rows — ``bool``, ``int``, ``float``, ``str``, ``bytes`` or ``None`` per
column — and :func:`encode_change` / :func:`decode_change` convert to and from the
single-object Avro bytes. A bytes value travels as a ``Binary`` record ``{"data": b}``
(schemas/ChangeEvent.avsc says why); both directions hide that, so callers only ever see
``bytes``.

Invariants (unit and property tests in tests/unit/wire/test_changes.py):

A. ``parse_txn(txn_header(t, s, c)) == TxnRef(t, s, c)`` for every valid txn id t (non-empty,
   no ``/`` or ``:``, printable ASCII) and 1 <= s <= c; anything else is a ValueError.
B. ``decode_change(encode_change(e)) == e`` for every event a :class:`Table` builds,
   bytes values included (they come back as ``bytes``, never as ``{"data": ...}``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from crossfeed.wire import change_writer, codec, grammar
from crossfeed.wire.headers import TXN

RECORD: Final = "ChangeEvent"
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1  # schema_version is an Avro int

Value: TypeAlias = bool | int | float | str | bytes | None
"""One column value as callers see it."""
Row: TypeAlias = Mapping[str, Value]
Op: TypeAlias = Literal["insert", "update", "delete", "ddl"]
ColumnType: TypeAlias = Literal["boolean", "long", "double", "string", "bytes"]

_TXN_ID = re.compile(grammar.TXN_ID)
_TXN_HEADER = re.compile(grammar.TXN.python().encode())
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_PYTHON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "boolean": (bool,),
    "long": (int,),
    "double": (float, int),
    "string": (str,),
    "bytes": (bytes, bytearray, memoryview),
}


# -- crossfeed-txn -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnRef:
    """A parsed ``crossfeed-txn`` header: change ``seq`` of ``count`` of transaction ``txn``
    (seq 0 is the sorter's begin/commit markers in ``.sorted``)."""

    txn: str
    seq: int
    count: int

    def encode(self) -> bytes:
        return f"{self.txn}/{self.seq}/{self.count}".encode()


def check_txn_id(txn: str) -> str:
    """``txn`` if it is a valid transaction id, else ValueError saying why."""
    if not _TXN_ID.fullmatch(txn):
        raise ValueError(
            f"txn id {txn!r} is not valid: it must be non-empty printable ASCII without "
            "spaces, '/' or ':'"
        )
    return txn


def txn_header(txn: str, seq: int, count: int) -> bytes:
    """The ``crossfeed-txn`` value ``<txn>/<seq>/<count>`` of change ``seq`` (1..count)."""
    check_txn_id(txn)
    if not 1 <= seq <= count:
        raise ValueError(f"{TXN}: seq {seq} must be between 1 and count {count}")
    if count > grammar.MAX_COUNT:
        raise ValueError(f"{TXN}: count {count} is over {grammar.MAX_COUNT}")
    return f"{txn}/{seq}/{count}".encode()


def parse_txn(value: bytes | None, *, markers: bool = False) -> TxnRef:
    """Parse a ``crossfeed-txn`` value; ValueError naming the bad value.

    seq must be 1..count; with ``markers`` also 0 (``.sorted``'s begin/commit).
    """
    if value is None:
        raise ValueError(f"{TXN} header has no value; expected <txn id>/<seq>/<count>")
    match = _TXN_HEADER.fullmatch(value)  # one regex: the puller parses one per change
    if match is None:
        raise ValueError(
            f"{TXN} {value!r}: expected <txn id>/<seq>/<count>, the txn id non-empty "
            "printable ASCII without spaces, '/' or ':'"
        )
    seq, count = int(match[2]), int(match[3])
    if not (0 if markers else 1) <= seq <= count:
        raise ValueError(f"{TXN} {value!r}: seq must be between 1 and count")
    return TxnRef(match[1].decode("ascii"), seq, count)


# -- ChangeEvent -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table (``ChangeEvent.columns``)."""

    name: str
    type: ColumnType
    primary_key: bool = False
    nullable: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a column needs a name")
        if self.type not in _PYTHON_TYPES:
            raise ValueError(f"column {self.name}: type must be one of {sorted(_PYTHON_TYPES)}")
        if self.primary_key and self.nullable:
            object.__setattr__(self, "nullable", False)  # primary-key columns never are

    def as_avro(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "primary_key": self.primary_key,
            "nullable": self.nullable,
        }


@dataclass(frozen=True)
class ChangeEvent:
    """A decoded ``ChangeEvent``: bytes values are plain ``bytes``."""

    table: str
    op: Op
    schema_version: int
    columns: tuple[Column, ...]
    key: dict[str, Value]
    before: dict[str, Value] | None = None
    after: dict[str, Value] | None = None
    ddl: str | None = None
    checked: bool = field(default=False, compare=False, repr=False)
    """Built by a :class:`Table`, which checked every value: encoding skips Avro's (slow)
    full validation."""


@dataclass(frozen=True)
class Table:
    """A table's shape at one schema version; builds the ChangeEvents of its rows.

    ``columns`` lists the primary-key columns first, in key order (the schema's rule);
    :meth:`insert`, :meth:`update` and :meth:`delete` check rows against them (unknown
    columns, a missing or null primary-key value, a value of the wrong type are
    ValueErrors) and :meth:`ddl` returns the event plus the table at its next version.
    """

    name: str
    columns: tuple[Column, ...]
    schema_version: int = 1

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a table needs a name")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: duplicate column names in {names}")
        keys = [c.primary_key for c in self.columns]
        if not any(keys):
            raise ValueError(f"table {self.name}: no primary-key column")
        if keys != sorted(keys, reverse=True):
            raise ValueError(f"table {self.name}: primary-key columns must come first")
        object.__setattr__(self, "columns", tuple(self.columns))
        # Looked up for every row a producer builds: computed once.
        object.__setattr__(self, "_known", {c.name: c for c in self.columns})
        object.__setattr__(self, "_keys", tuple(c for c in self.columns if c.primary_key))

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return self._keys  # type: ignore[attr-defined,no-any-return]

    def key_of(self, row: Row) -> dict[str, Value]:
        """The primary-key part of ``row``."""
        key = {c.name: row.get(c.name) for c in self.key_columns}
        missing = [name for name, v in key.items() if v is None]
        if missing:
            raise ValueError(f"table {self.name}: primary-key column(s) {missing} missing or null")
        return self._row(key, "key")

    def _row(self, row: Row, what: str) -> dict[str, Value]:
        known: dict[str, Column] = self._known  # type: ignore[attr-defined]
        if not row.keys() <= known.keys():
            unknown = sorted(set(row) - set(known))
            raise ValueError(f"table {self.name}: {what} has unknown column(s) {unknown}")
        out: dict[str, Value] = {}
        for name, value in row.items():
            col = known[name]
            out[name] = value
            if type(value) is int and col.type == "long":  # the common case first
                if not _LONG_MIN <= value <= _LONG_MAX:
                    raise ValueError(f"table {self.name}: column {name}: {value} is out of range")
                continue
            if value is None:
                if not col.nullable or col.primary_key:
                    raise ValueError(f"table {self.name}: column {name} must not be null")
                continue
            allowed = _PYTHON_TYPES[col.type]
            if not isinstance(value, allowed) or (col.type != "boolean" and type(value) is bool):
                raise ValueError(
                    f"table {self.name}: column {name} is {col.type}, got "
                    f"{type(value).__name__} {value!r:.60}"
                )
            if col.type == "double":
                out[name] = float(value)  # an int would take the union's long branch
            elif isinstance(value, int) and not _LONG_MIN <= value <= _LONG_MAX:
                raise ValueError(f"table {self.name}: column {name}: {value} is out of range")
        return out

    def _event(
        self, op: Op, key: dict[str, Value], before: Row | None, after: Row | None
    ) -> ChangeEvent:
        return ChangeEvent(
            self.name,
            op,
            self.schema_version,
            self.columns,
            key,
            None if before is None else self._row(before, "before"),
            None if after is None else self._row(after, "after"),
            checked=True,
        )

    def insert(self, row: Row) -> ChangeEvent:
        return self._event("insert", self.key_of(row), None, row)

    def update(self, before: Row | None, after: Row) -> ChangeEvent:
        """``before`` may be None when unknown; the key comes from ``after``."""
        return self._event("update", self.key_of(after), before, after)

    def delete(self, row: Row) -> ChangeEvent:
        """``row``: the deleted row (at least its primary key)."""
        return self._event("delete", self.key_of(row), row, None)

    def ddl(self, what: str, columns: Sequence[Column]) -> tuple[ChangeEvent, Table]:
        """A schema change: the event (with the new column list) and the new table."""
        new = Table(self.name, tuple(columns), self.schema_version + 1)
        event = ChangeEvent(
            new.name, "ddl", new.schema_version, new.columns, {}, ddl=what, checked=True
        )
        return event, new


def _wrap(row: Mapping[str, Value] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        k: {"data": bytes(v)} if isinstance(v, (bytes, bytearray, memoryview)) else v
        for k, v in row.items()
    }


def _unwrap(row: Mapping[str, Any] | None) -> dict[str, Value] | None:
    if row is None:
        return None
    return {k: v["data"] if isinstance(v, dict) else v for k, v in row.items()}


def _avro_value(event: ChangeEvent) -> dict[str, Any]:
    return {
        "table": event.table,
        "op": event.op,
        "schema_version": event.schema_version,
        "columns": [c.as_avro() for c in event.columns],
        "key": _wrap(event.key),
        "before": _wrap(event.before),
        "after": _wrap(event.after),
        "ddl": event.ddl,
    }


def encode_change(event: ChangeEvent) -> bytes:
    """The ``ChangeEvent`` Avro value (single-object encoding) of ``event``: written
    directly (change_writer.py) when a Table built it, else by the codec with Avro's full
    validation."""
    # A Table checked the values, not the version a ddl raised (Avro int): the codec says
    # what is wrong with one out of range.
    if event.checked and _INT_MIN <= event.schema_version <= _INT_MAX:
        header = _direct_header(codec.default_codec())
        if header is not None:
            return change_writer.write(header, event)
    return codec.encode(RECORD, _avro_value(event), checked=event.checked)


_SAMPLE = Table(
    "sample",
    (
        Column("id", "long", primary_key=True),
        Column("ok", "boolean"),
        Column("price", "double"),
        Column("name", "string"),
        Column("blob", "bytes"),
        Column("gone", "string"),
    ),
    7,
)


@functools.lru_cache(maxsize=4)
def _direct_header(current: codec.Codec) -> bytes | None:
    """The header for change_writer when it writes ``current``'s bytes, checked once per
    codec on events with every kind of value; None (fastavro for all) when it does not."""
    row: dict[str, Value] = {
        "id": -(2**40),
        "ok": True,
        "price": 2.5,
        "name": "ü",
        "blob": b"\x00",
        "gone": None,
    }
    samples = [
        _SAMPLE.update(row, {**row, "ok": False, "price": -0.0, "id": 3}),
        _SAMPLE.delete(row),
        _SAMPLE.ddl("ALTER TABLE sample DROP gone", _SAMPLE.columns[:5])[0],
    ]
    try:
        header = current.header(RECORD)
        for event in samples:
            if change_writer.write(header, event) != current.encode(RECORD, _avro_value(event)):
                return None
    except Exception:  # another schema that these events do not even fit
        return None
    return header


def decode_change(value: bytes) -> ChangeEvent:
    """Read a ``ChangeEvent`` value back (CodecError if it is not one)."""
    raw = codec.decode(RECORD, value)
    return ChangeEvent(
        raw["table"],
        raw["op"],
        raw["schema_version"],
        tuple(
            Column(c["name"], c["type"], c["primary_key"], c["nullable"]) for c in raw["columns"]
        ),
        _unwrap(raw["key"]) or {},
        _unwrap(raw["before"]),
        _unwrap(raw["after"]),
        raw["ddl"],
    )
