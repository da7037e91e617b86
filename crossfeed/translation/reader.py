"""Bounded reads of one cluster, read_committed (what translation reads from the source)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from crossfeed.kafka import clients
from crossfeed.translation.kafka_io import QUIET_CONF, Unreachable
from crossfeed.translation.scan import RangeScan, Seen, summarize


class RangeReader:
    """Bounded reads of one cluster, read_committed, with an assign-only consumer."""

    def __init__(self, conf: Mapping[str, Any], name: str = "translator") -> None:
        self._consumer = clients.consumer(
            dict(conf),
            **QUIET_CONF,
            **{
                "group.id": f"crossfeed-{name}-reader",  # never joined: assign only
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 20,
            },
        )

    def close(self) -> None:
        self._consumer.close()

    def bounds(self, topic: str, partition: int, timeout_s: float = 2.0) -> tuple[int, int]:
        """(log start, last stable offset) of one partition."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
        except KafkaException as err:
            raise Unreachable(f"watermarks of {topic}/{partition}: {err}") from None
        return int(low), int(high)

    def scan(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        limit: int,
        classify: Callable[[Any], Seen],
        budget_s: float = 3.0,
    ) -> tuple[RangeScan, bool]:
        """Read ``[start, end)`` (at most ``limit`` records, ``budget_s`` seconds).

        Returns the scan and whether it is *stable*: it lies wholly below the last stable
        offset, so later reads would give the same answer (a scan that reached the end of
        the partition covers the range up to ``end`` only "as of now").
        """
        low, high = self.bounds(topic, partition)
        reach = min(end, high)
        if start >= reach:
            # Nothing committed in [start, end) yet (or ever, when end <= high).
            return summarize(start, end, end if end > high else max(start, end), ()), end <= high
        tp = TopicPartition(topic, partition, max(start, low))
        seen: list[Seen] = []
        scanned_to = start
        done = False
        deadline = time.monotonic() + budget_s
        self._consumer.assign([tp])
        try:
            while not done and len(seen) < limit and time.monotonic() < deadline:
                batch: list[Any] = self._consumer.consume(min(500, limit - len(seen)), timeout=0.2)
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        done = done or err.code() == KafkaError._PARTITION_EOF
                        continue
                    if msg.offset() >= reach:
                        done = True
                        break
                    seen.append(classify(msg))
                    scanned_to = msg.offset() + 1
                    if len(seen) >= limit:
                        break
        except KafkaException as err:
            raise Unreachable(f"read {topic}/{partition}: {err}") from None
        finally:
            self._consumer.unassign()
        if done:
            # Read past the range, or to the end of the partition (when the range reaches
            # beyond the end, nothing exists there yet either).
            scanned_to = max(scanned_to, end)
        return summarize(start, end, scanned_to, seen), end <= high

    def record_timestamp(self, topic: str, partition: int, offset: int) -> int:
        """Timestamp of the first committed record at or after ``offset`` (-1 if none)."""
        self._consumer.assign([TopicPartition(topic, partition, offset)])
        try:
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                batch: list[Any] = self._consumer.consume(1, timeout=0.3)
                for msg in batch:
                    if msg.error() is None:
                        return int(msg.timestamp()[1])
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return -1
        except KafkaException as err:
            raise Unreachable(f"read {topic}/{partition}@{offset}: {err}") from None
        finally:
            self._consumer.unassign()
        return -1
