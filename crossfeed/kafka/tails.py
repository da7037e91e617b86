"""What the end of a partition holds, committed and aborted, told apart by reading it twice.

After a crash mid-commit a transaction has been seen committed on one of its partitions
and aborted on another (a single-broker cluster killed while the transaction coordinator
wrote its markers), so a service that keeps its position in one partition and its output
in another checks the output's end before it resumes: the records a read_committed reader
sees, and the ones only a read_uncommitted reader sees (aborted, or above the last stable
offset — never read here: a transaction another writer holds open hides what follows).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, NamedTuple, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from crossfeed.kafka import clients

T = TypeVar("T")
Header = tuple[str, bytes | None]

# Records read first: a task opening reads every partition's end (1,024 partitions in the
# scale benchmark), and the newest committed record is usually among the last few.
FIRST_WINDOW = 256
# At most this far back (x4 each time): past a whole aborted transaction of
# max_batch_records, not through an active-active topic's whole history of local writes.
MOST = 1 << 16


class Tail(NamedTuple, Generic[T]):
    """The values of the records near a partition's end (those ``value_of`` recognises)."""

    committed: T | None  # the greatest value among committed records (None: none found)
    aborted: list[T]  # values of records no read_committed reader sees


class TailReader:
    """Reads the end of partitions of one cluster (two consumers and an admin client)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        group = {"group.id": "crossfeed-tail-check"}
        self.everything = clients.consumer(conf, **group, **{"isolation.level": "read_uncommitted"})
        self.committed = clients.consumer(conf, **group)
        self.admin = clients.admin(conf)

    def close(self) -> None:
        self.everything.close()
        self.committed.close()

    def read(self, where: KafkaTP, value_of: Callable[[list[Header] | None], T | None]) -> Tail[T]:
        """The values ``value_of`` finds in the headers of the records at the end of
        ``where``, from its last stable offset back, in growing windows until a committed
        one is found (or the partition's start, or :data:`MOST` records)."""
        low, _ = self.committed.get_watermark_offsets(where, timeout=10)
        stable = self.admin.list_offsets(
            {where: OffsetSpec.latest()},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=10,
        )
        try:
            end = int(stable[where].result(timeout=15).offset)
        except concurrent.futures.TimeoutError:  # callers handle Kafka's errors only
            unknown = f"{where.topic}/{where.partition}: no last stable offset in 15 s"
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, unknown)) from None
        tail: Tail[T] = Tail(None, [])
        for start in backwards(low, end, FIRST_WINDOW, MOST):
            values: dict[int, T] = {}  # offset -> value, committed or not
            for msg in scan(self.everything, where, start, end):
                value = value_of(msg.headers())
                if value is not None:
                    values[msg.offset()] = value
            seen = {msg.offset() for msg in scan(self.committed, where, start, end)}
            kept = [value for offset, value in values.items() if offset in seen]
            aborted = [value for offset, value in values.items() if offset not in seen]
            tail = Tail(max(kept) if kept else None, aborted)  # type: ignore[type-var]
            if kept:
                break
        return tail


def backwards(low: int, end: int, first: int, most: int | None = None) -> Iterator[int]:
    """The starts of growing windows [start, end) that read a partition backwards from
    ``end``: ``first`` records, then four times as many each time, until the window
    reaches ``low`` (the partition's start) or spans ``most`` records. The caller stops
    as soon as a window holds what it looks for."""
    window = first
    while True:
        start = max(low, end - window)
        yield start
        if start <= low or (most is not None and window >= most):
            return
        window *= 4


def scan(consumer: Any, where: KafkaTP, start: int, end: int, timeout_s: float = 30.0) -> list[Any]:
    """The records ``consumer`` (read_committed or not) returns in [start, end) of
    ``where``; KafkaException if it does not get there within ``timeout_s``."""
    out: list[Any] = []
    if start >= end:
        return out
    consumer.assign([KafkaTP(where.topic, where.partition, start)])
    deadline = time.monotonic() + timeout_s
    while consumer.position([where])[0].offset < end:
        if time.monotonic() > deadline:
            consumer.unassign()
            unread = f"{where.topic}/{where.partition}: not read to offset {end} in time"
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, unread))
        for msg in consumer.consume(1000, timeout=0.2):
            if msg.error() is None and msg.offset() < end:
                out.append(msg)
    consumer.unassign()
    return out
