"""The change producer: commit timestamps, transactions and resolved watermarks.

For ordered feeds (DESIGN.md §4 Puller, Sorter), every change carries its commit
timestamp (``crossfeed-commit-ts``, microseconds) and, when it belongs to a transaction of
several changes, ``crossfeed-txn`` = ``<txn id>/<seq>/<count>``; and the producer
promises, per partition, "nothing with a commit_ts ≤ T will follow" by writing a
``resolved`` watermark (header ``crossfeed-type: resolved``, an Avro ``ResolvedMark``
whose ``next_offset`` is -1 and ``source_cluster`` empty: the producer knows neither).

The promise holds because this producer hands out commit timestamps itself, strictly
increasing, and refuses to write a change at or below a watermark it already wrote.
One producer per source of changes (one writer per table, say); with a transactional
config (``transactional.id``) every :meth:`ChangeProducer.transaction` is also a Kafka
transaction, so a source transaction is never half visible.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from crossfeed.wire import codec, headers

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Change:
    """One record of a transaction."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: Sequence[Header] = ()


class ChangeProducer:
    """Produces changes with commit timestamps and writes resolved watermarks."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.transactional = "transactional.id" in config
        self._producer = Producer({"enable.idempotence": True, **config})
        if self.transactional:
            self._producer.init_transactions(30)
        self._last_ts_us = 0
        self._resolved_us = 0
        self._written: set[str] = set()

    def _next_ts(self, requested: int | None) -> int:
        """The commit timestamp of the next transaction: the one asked for (above the last
        watermark), else the clock, kept above every earlier one."""
        if requested is not None:
            if requested <= self._resolved_us:
                raise ValueError(
                    f"commit_ts {requested} is at or below the resolved watermark "
                    f"{self._resolved_us} this producer already wrote"
                )
            ts = requested
        else:
            ts = max(int(time.time() * 1_000_000), self._last_ts_us + 1, self._resolved_us + 1)
        self._last_ts_us = max(self._last_ts_us, ts)
        return ts

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        commit_ts_us: int | None = None,
    ) -> int:
        """One change, a transaction of its own; returns its commit_ts (µs)."""
        return self.transaction([Change(topic, value, key, partition, headers)], commit_ts_us)[1]

    def transaction(
        self,
        changes: Sequence[Change],
        commit_ts_us: int | None = None,
        txn_id: str | None = None,
    ) -> tuple[str, int]:
        """Write ``changes`` as one source transaction (one commit_ts, ``crossfeed-txn``
        on each when there are several); returns (txn id, commit_ts µs)."""
        if not changes:
            raise ValueError("a transaction needs at least one change")
        ts = self._next_ts(commit_ts_us)
        txn = txn_id or uuid.uuid4().hex
        if "/" in txn:
            raise ValueError(f"txn id {txn!r} must not contain '/'")
        count = len(changes)
        if self.transactional:
            self._producer.begin_transaction()
        try:
            for seq, change in enumerate(changes, start=1):
                stamped = [
                    *(h for h in change.headers if h[0] not in (headers.COMMIT_TS, headers.TXN)),
                    (headers.COMMIT_TS, str(ts).encode()),
                ]
                if count > 1:
                    stamped.append((headers.TXN, f"{txn}/{seq}/{count}".encode()))
                self._produce(change.topic, change.value, change.key, change.partition, stamped)
            if self.transactional:
                self._producer.commit_transaction(30)
        except Exception:
            if self.transactional:
                self._producer.abort_transaction(30)
            raise
        return txn, ts

    def resolved(self, topics: Iterable[str] | None = None, ts_us: int | None = None) -> int:
        """Write a watermark to every partition of ``topics`` (default: every topic this
        producer wrote); returns the resolved ts (µs), by default the newest commit_ts.

        After it, this producer refuses changes with a commit_ts at or below it.
        """
        ts = self._last_ts_us if ts_us is None else ts_us
        if ts < self._resolved_us:
            raise ValueError(
                f"resolved ts {ts} is below the one already written ({self._resolved_us})"
            )
        if ts_us is not None and ts_us < self._last_ts_us:
            raise ValueError(
                f"resolved ts {ts_us} is below commit_ts {self._last_ts_us} already written"
            )
        names = sorted(set(topics) if topics is not None else self._written)
        marks = [
            (headers.TYPE, headers.TYPE_RESOLVED.encode()),
            (headers.COMMIT_TS, str(ts).encode()),
        ]
        if self.transactional:
            self._producer.begin_transaction()
        for topic in names:
            meta = self._producer.list_topics(topic, timeout=10).topics[topic]
            for partition in sorted(meta.partitions):
                value = codec.encode(
                    "ResolvedMark",
                    {
                        "source_cluster": "",
                        "topic": topic,
                        "partition": partition,
                        "resolved_ts_us": ts,
                        "next_offset": -1,
                    },
                )
                self._produce(topic, value, None, partition, marks)
        if self.transactional:
            self._producer.commit_transaction(30)
        self._resolved_us = ts
        return ts

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        stamped: Sequence[Header],
    ) -> None:
        kwargs: dict[str, Any] = {"value": value, "key": key, "headers": list(stamped)}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._written.add(topic)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for delivery; returns how many records are still queued."""
        return int(self._producer.flush(timeout_s))

    def close(self) -> None:
        self.flush()
