"""What crossfeed reads of Debezium's records (PostgreSQL connector, Connect's JSON converter
with schemas): the transaction block of a data event, the BEGIN/END records of the
transaction topic and the heartbeats. No I/O.

Debezium writes, for topic prefix ``P`` (``topic.prefix``):

* ``P.<schema>.<table>``: one data event per row change, ``{"schema": ..., "payload":
  {"before", "after", "source", "transaction", "op", ...}}``. With
  ``provide.transaction.metadata=true`` a streamed event's ``transaction`` block holds
  ``id`` (``<xid>:<lsn>``, the LSN of *this event*: only the xid names the transaction),
  ``total_order`` (1.. across the transaction) and ``data_collection_order`` (1.. per
  table). Snapshot events (``op`` ``r``) have no block; ``source.snapshot`` says where in
  the snapshot they are (``first`` ... ``last``).
* ``P.transaction`` (one partition, in commit order): ``BEGIN`` and ``END`` records; only
  END carries ``event_count`` and ``data_collections`` (events per table). The LSN in an
  END's id is the transaction's commit LSN, which grows with commit order.
* ``__debezium-heartbeat.P``: ``{"ts_ms": ...}`` every ``heartbeat.interval.ms``.

Schema by reference: the Connect schema is ~3/4 of a data event's bytes and the same in
every event of a table version. On its hop into the target cluster the puller keeps only
the payload in ``.changes`` (header ``crossfeed-schema``: the schema's id) and writes the
schema once into the compacted ``_crossfeed.<feed>.schemas`` in the same Kafka transaction
(:class:`EnvelopeSplitter`); the sinks put the exact bytes back (:func:`join_envelope`).

The data events are read with a fast path (the converter writes the envelope's fields in
schema order, and a ``"`` inside a JSON string is always escaped, so the last
``"transaction":`` of the bytes is the envelope's); anything it does not recognise is
parsed in full.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

TRANSACTION_SUFFIX: Final = ".transaction"
# The replication origins crossfeed's sinks write under (crossfeed/pair/sql.py): Debezium
# reports them as source.origin, and a transaction with one is never sent back.
ORIGIN_PREFIX: Final = "crossfeed:"
HEARTBEAT_PREFIX: Final = "__debezium-heartbeat."

_TXN_BLOCK = re.compile(
    rb'"transaction":(?:null|\{"id":"(\d+):\d*","total_order":(\d+),'
    rb'"data_collection_order":(\d+)\})'
)
_SNAPSHOT = re.compile(rb'"snapshot":(?:null|"([a-z_]+)")')
# source.origin (Debezium 3.x): the replication origin the transaction was written under
_ORIGIN = re.compile(rb'"origin":(?:null|"((?:[^"\\]|\\.)*)")')


class NotDebezium(ValueError):
    """A record that is not what Debezium writes there; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class DataEvent:
    """What ordering needs of one data event. ``xid`` None: no transaction block (a
    snapshot row, or an event written without transaction metadata)."""

    xid: str | None
    total_order: int = 0
    collection_order: int = 0
    snapshot: str | None = None  # source.snapshot: first, true, last, ... (None: streamed)
    origin: str | None = None  # source.origin: the replication origin it was written under


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """An END record of the transaction topic."""

    xid: str
    lsn: int  # the commit LSN: grows with commit order
    event_count: int
    collections: tuple[tuple[str, int], ...]  # (schema.table, events) as Debezium lists them
    ts_us: int

    @property
    def txn_id(self) -> str:
        """crossfeed's txn id: unique even when PostgreSQL reuses an xid."""
        return f"{self.xid}.{self.lsn}"


def transaction_topic(prefix: str) -> str:
    return prefix + TRANSACTION_SUFFIX


def heartbeat_topic(prefix: str) -> str:
    return HEARTBEAT_PREFIX + prefix


def collection_topic(prefix: str, collection: str) -> str:
    """The data topic of ``schema.table`` under the default topic naming."""
    return f"{prefix}.{collection}"


def data_event(value: bytes | None) -> DataEvent:
    """The ordering facts of a data event's value; NotDebezium if it is not one."""
    if not value:
        raise NotDebezium("no value (a tombstone)")
    at = value.rfind(b'"transaction":')
    snap_at = value.rfind(b'"snapshot":', 0, at if at >= 0 else len(value))
    if at >= 0 and snap_at >= 0 and value.startswith(b'{"schema":'):
        txn = _TXN_BLOCK.match(value, at)
        snap = _SNAPSHOT.match(value, snap_at)
        # source comes after before/after and ends before the transaction block: the last
        # "origin": ahead of the block is the source's (a column of that name is earlier)
        origin_at = value.rfind(b'"origin":', snap_at, at)
        found = _ORIGIN.match(value, origin_at) if origin_at >= 0 else None
        if txn is not None and snap is not None and (origin_at < 0 or found is not None):
            snapshot = _snapshot_phase(snap.group(1))
            origin = _origin(found.group(1)) if found is not None else None
            if txn.group(1) is None:
                return DataEvent(None, snapshot=snapshot, origin=origin)
            return DataEvent(
                txn.group(1).decode(), int(txn.group(2)), int(txn.group(3)), snapshot, origin
            )
    return _data_event_slow(value)


def is_crossfeed_origin(name: object) -> bool:
    """Was a captured transaction written by a crossfeed sink (its source.origin)?"""
    return isinstance(name, str) and name.startswith(ORIGIN_PREFIX)


def _origin(raw: bytes | None) -> str | None:
    return None if raw is None else json.loads(b'"' + raw + b'"')


def _snapshot_phase(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    phase = raw.decode() if isinstance(raw, bytes) else raw
    return None if phase in ("false", "incremental") else phase


def _data_event_slow(value: bytes) -> DataEvent:
    return data_event_of(payload_of(value))


def data_event_of(payload: Any) -> DataEvent:
    """The ordering facts of a decoded data event (JSON's payload, or an Avro value)."""
    if not isinstance(payload, dict):
        raise NotDebezium("the value is not a record")
    if "op" not in payload or "source" not in payload:
        raise NotDebezium("the payload has no 'op' and 'source' (not a Debezium change event)")
    source = payload.get("source") or {}
    snapshot = _snapshot_phase(source.get("snapshot"))
    origin = source.get("origin")
    origin = origin if isinstance(origin, str) else None
    block = payload.get("transaction")
    if block is None:
        return DataEvent(None, snapshot=snapshot, origin=origin)
    try:
        xid = str(block["id"]).split(":", 1)[0]
        return DataEvent(
            xid, int(block["total_order"]), int(block["data_collection_order"]), snapshot, origin
        )
    except (KeyError, TypeError, ValueError) as err:
        raise NotDebezium(f"malformed transaction block {block!r:.120}: {err}") from None


def payload_of(value: bytes) -> dict[str, Any]:
    """The ``payload`` of a JSON-converter value (with or without schemas)."""
    try:
        decoded = json.loads(value)
    except (ValueError, UnicodeDecodeError) as err:
        raise NotDebezium(f"not JSON: {err}") from None
    if not isinstance(decoded, dict):
        raise NotDebezium(f"JSON {type(decoded).__name__}, not an object")
    payload = decoded.get("payload", decoded) if "schema" in decoded else decoded
    if not isinstance(payload, dict):
        raise NotDebezium("the payload is not an object")
    return payload


def txn_record(value: bytes | None) -> TxnEnd | None:
    """An END record of the transaction topic, or None for a BEGIN; NotDebezium else."""
    if not value:
        raise NotDebezium("no value on the transaction topic")
    return txn_record_of(payload_of(value))


def txn_record_of(payload: Any) -> TxnEnd | None:
    """:func:`txn_record` of a decoded record (JSON's payload, or an Avro value)."""
    if not isinstance(payload, dict):
        raise NotDebezium("the transaction record is not a record")
    status = payload.get("status")
    if status == "BEGIN":
        return None
    if status != "END":
        raise NotDebezium(f"transaction record with status {status!r} (BEGIN or END expected)")
    try:
        xid, lsn = str(payload["id"]).split(":", 1)
        collections = tuple(
            (str(c["data_collection"]), int(c["event_count"]))
            for c in payload.get("data_collections") or ()
        )
        return TxnEnd(
            xid, int(lsn), int(payload["event_count"]), collections, int(payload["ts_ms"]) * 1000
        )
    except (KeyError, TypeError, ValueError) as err:
        raise NotDebezium(f"malformed END record: {err}") from None


def heartbeat_ts_us(value: bytes | None) -> int:
    """The time of a heartbeat record, µs; NotDebezium if it has none."""
    if not value:
        raise NotDebezium("heartbeat without a value")
    return heartbeat_ts_us_of(payload_of(value))


def heartbeat_ts_us_of(payload: Any) -> int:
    """:func:`heartbeat_ts_us` of a decoded record (JSON's payload, or an Avro value)."""
    try:
        return int(payload["ts_ms"]) * 1000
    except (KeyError, TypeError, ValueError) as err:
        raise NotDebezium(f"heartbeat without ts_ms: {err}") from None


ENVELOPE_HEAD: Final = b'{"schema":'
PAYLOAD_FIELD: Final = b',"payload":'


def schema_id(schema: bytes) -> bytes:
    """The id of a schema half: a content hash (32 hex digits), the key it is stored under."""
    return hashlib.blake2b(schema, digest_size=16).hexdigest().encode()


def join_envelope(schema: bytes, payload: bytes) -> bytes:
    """The JSON converter's value of ``schema`` and ``payload``, byte for byte."""
    return b"".join((ENVELOPE_HEAD, schema, PAYLOAD_FIELD, payload, b"}"))


class EnvelopeSplitter:
    """Splits JSON-converter values ``{"schema":S,"payload":P}`` into (id of S, S, P) such
    that :func:`join_envelope` gives the value back byte for byte. Each distinct S is
    checked once to be one whole JSON object (so S is exactly the schema half, whatever
    the payload holds); a value of any other form is not split (None)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._ids: dict[bytes, bytes] = {}  # schema half -> its id
        self._limit = limit

    def split(self, value: bytes | None) -> tuple[bytes, bytes, bytes] | None:
        if value is None or not value.startswith(ENVELOPE_HEAD) or not value.endswith(b"}"):
            return None
        start = len(ENVELOPE_HEAD)
        # A '"' inside a JSON string is escaped, so ',"payload":' appears unescaped only
        # between members of an object: the envelope's own, or one nested in the schema
        # (a parameters map with a "payload" key) -- the check below tells them apart.
        cut = value.find(PAYLOAD_FIELD, start)
        if cut < 0:
            return None
        schema = value[start:cut]
        known = self._ids.get(schema)
        if known is None:
            end = _object_end(value, start)
            if end is None or value[end : end + len(PAYLOAD_FIELD)] != PAYLOAD_FIELD:
                return None
            cut = end
            schema = value[start:cut]
            known = self._ids.get(schema)
            if known is None:
                if len(self._ids) >= self._limit:
                    self._ids.clear()
                known = self._ids[schema] = schema_id(schema)
        return known, schema, value[cut + len(PAYLOAD_FIELD) : -1]


_DECODER = json.JSONDecoder()


def _object_end(value: bytes, start: int) -> int | None:
    """The index just past the JSON object starting at ``start`` of ``value``; None if
    there is none."""
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return None
    try:
        decoded, end = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        return None
    # raw_decode counts characters; the cut is in bytes.
    return len(text[:end].encode()) if not text.isascii() else end
