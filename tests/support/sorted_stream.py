"""Writing ``_crossfeed.<feed>.sorted`` by hand, in the sorter's format (docs/ordered-feeds.md
§3), so the ordered-feed sinks can be tested without pullers or Spark: whole transactions,
resolved marks, replays and transactions cut short, exactly as the contract allows them.

Bank-like ChangeEvents for the PostgreSQL sink come from :func:`change_event`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.wire import codec, headers

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Change:
    """One data record of a source transaction (its seq and count are added)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int = 0


@dataclass(frozen=True)
class Txn:
    txn_id: str
    commit_ts: int
    changes: tuple[Change, ...]


FORMS = ("framed", "inline", "mixed")
"""How :class:`SortedWriter` writes a transaction (docs/ordered-feeds.md §3): framed by
``begin``/``commit`` records (what a sorter before the inline form wrote), inline (data
records with ``crossfeed-order``, what the sorter writes now), or mixed — each transaction
one or the other at random, as in a stream whose sorter was upgraded mid-way."""


class SortedWriter:
    """Produces sorted-stream records to one partition of ``topic`` (not transactional:
    the sorter's Spark writer is not either), in call order, each transaction in ``form``
    (:data:`FORMS`; ``seed`` for mixed)."""

    def __init__(
        self, conf: Mapping[str, Any], topic: str, form: str = "inline", seed: int = 0
    ) -> None:
        assert form in FORMS, form
        self.form, self._rng = form, random.Random(seed)
        self.topic = topic
        kafka_topics.ensure_topic(clients.admin(conf), topic, 1, {"cleanup.policy": "delete"})
        self.producer = clients.producer(conf, **{"linger.ms": 5, "compression.type": "none"})

    def _send(
        self, key: bytes | None, value: bytes | None, hdrs: Sequence[Header], ts: int = 0
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topic, value=value, key=key, partition=0, headers=list(hdrs), timestamp=ts
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    def marker(self, kind: str, txn_id: str, commit_ts: int, count: int) -> None:
        self._send(
            None,
            None,
            [
                (headers.TYPE, kind.encode()),
                (headers.COMMIT_TS, str(commit_ts).encode()),
                (headers.TXN, f"{txn_id}/0/{count}".encode()),
            ],
        )

    def data(self, txn: Txn, seq: int, *, inline: bool = False) -> None:
        change = txn.changes[seq - 1]
        count = len(txn.changes)
        hdrs = [
            *change.headers,
            (headers.COMMIT_TS, str(txn.commit_ts).encode()),
            (headers.TXN, f"{txn.txn_id}/{seq}/{count}".encode()),
        ]
        if inline:
            hdrs.append((headers.ORDER, f"{seq}/{count}/{txn.commit_ts}/{txn.txn_id}".encode()))
        self._send(change.key, change.value, hdrs, change.timestamp_ms or txn.commit_ts // 1000)

    def txn(self, txn: Txn, *, cut_after: int | None = None) -> None:
        """The transaction whole (framed: begin, data, commit; inline: its data records);
        with ``cut_after`` only that many data records (framed: after its begin)."""
        count = len(txn.changes)
        inline = self.form == "inline" or (self.form == "mixed" and self._rng.random() < 0.5)
        if not inline:
            self.marker(headers.TYPE_BEGIN, txn.txn_id, txn.commit_ts, count)
        stop = count if cut_after is None else cut_after
        for seq in range(1, stop + 1):
            self.data(txn, seq, inline=inline)
        if cut_after is None and not inline:
            self.marker(headers.TYPE_COMMIT, txn.txn_id, txn.commit_ts, count)

    def resolved(self, resolved_ts: int) -> None:
        value = codec.encode(
            "ResolvedMark",
            {
                "source_cluster": "",
                "topic": "",
                "partition": -1,
                "resolved_ts_us": resolved_ts,
                "next_offset": -1,
            },
        )
        self._send(
            None,
            value,
            [
                (headers.TYPE, headers.TYPE_RESOLVED.encode()),
                (headers.COMMIT_TS, str(resolved_ts).encode()),
            ],
        )

    def flush(self) -> None:
        self.producer.flush(30)


def applying(sinks: Sequence[Any], timeout_s: float = 60.0) -> Any:
    """The one ordered-sink process (ServiceProcess) applying the sorted stream: its
    /status lists the sorted partition as its task; the others stand by."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owning = [s for s in sinks if s.alive and (s.status() or {}).get("tasks") == [0]]
        if len(owning) == 1:
            return owning[0]
        time.sleep(0.2)
    raise AssertionError(f"not exactly one sink applies: {[s.status() for s in sinks]}")


def _value(v: Any) -> Any:
    return {"data": v} if isinstance(v, bytes) else v


def change_event(
    table: str,
    op: str,
    columns: Sequence[tuple[str, str, bool]],
    key: Mapping[str, Any],
    after: Mapping[str, Any] | None = None,
    *,
    ddl: str | None = None,
    schema_version: int = 1,
) -> bytes:
    """A ChangeEvent value; ``columns`` are (name, type, primary_key)."""
    return codec.encode(
        "ChangeEvent",
        {
            "table": table,
            "op": op,
            "schema_version": schema_version,
            "columns": [
                {"name": n, "type": t, "primary_key": pk, "nullable": not pk}
                for n, t, pk in columns
            ],
            "key": {k: _value(v) for k, v in key.items()},
            "before": None,
            "after": None if after is None else {k: _value(v) for k, v in after.items()},
            "ddl": ddl,
        },
    )


class FastChangeEvents:
    """ChangeEvent values without the codec's full validation (for a million of them in
    a test): the same single-object bytes, fastavro's writer straight away."""

    def __init__(self) -> None:
        import fastavro

        self._fastavro = fastavro
        self._parsed = fastavro.parse_schema(codec.schema("ChangeEvent"))
        self._header = b"\xc3\x01" + codec.fingerprint("ChangeEvent").to_bytes(8, "little")

    def encode(self, event: Mapping[str, Any]) -> bytes:
        import io

        buf = io.BytesIO()
        buf.write(self._header)
        self._fastavro.schemaless_writer(buf, self._parsed, dict(event))
        return buf.getvalue()
