"""Fakes of the confluent-kafka Protocols the hot path is typed against
(crossfeed/kafka/protocols.py), for the unit tests of the puller's tasks and the Kafka
sink's transactions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from crossfeed.kafka.protocols import Header, Message

# Producer.produce's parameters after the topic, in order (crossfeed/kafka/protocols.py).
PRODUCE_ARGS = ("value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")


class FakeRecord:
    """A record: consumed from the source, or (with its log offset) a delivery report."""

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        self._topic, self._partition, self._offset, self._value = topic, partition, offset, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return b"k"

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[Header] | None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)


class FakeProducer:
    """Appends each produced record to a per-partition log (its offset is the log's
    length), runs delivery callbacks on flush, and lets a test make calls fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.logs: dict[tuple[str, int], int] = {}
        self.reports: list[tuple[Callable[[Any, Any], None], Message]] = []
        self.fail: dict[str, list[KafkaError]] = {}  # call name -> errors to raise, in turn
        self.interleave = False  # a foreign record lands between any two of ours
        # A fatal error (fenced) that flush raises the way confluent-kafka does: from its
        # error callback, then reported by Python as a SystemError of the next delivery
        # callback served in the same call (tests/integration/test_puller_membership.py).
        self.fatal_in_flush: KafkaError | None = None

    def _maybe_fail(self, name: str) -> None:
        errors = self.fail.get(name)
        if errors:
            raise KafkaException(errors.pop(0))

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        self._maybe_fail("produce")
        # Called by position (the hot loops) and by keyword (crossfeed's own records).
        kw = {**dict(zip(PRODUCE_ARGS[: len(args)], args, strict=True)), **kwargs}
        partition, value = kw.get("partition", -1), kw.get("value")
        where = (topic, max(partition, 0))
        offset = self.logs.get(where, 0) + (1 if self.interleave else 0)
        self.logs[where] = offset + 1
        self.calls.append(("produce", topic, partition, value, kw.get("headers")))
        report = kw.get("on_delivery") or kw.get("callback")
        if report is not None:
            self.reports.append((report, FakeRecord(topic, where[1], offset, value)))

    def poll(self, timeout: float = -1) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        self.calls.append(("flush",))
        if self.fatal_in_flush is not None:
            try:
                raise KafkaException(self.fatal_in_flush)
            except KafkaException as err:
                raise SystemError(
                    "<function Block.first> returned a result with an exception set"
                ) from err
        for report, record in self.reports:
            report(None, record)
        self.reports = []
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.calls.append(("purge",))

    def begin_transaction(self) -> None:
        self.calls.append(("begin",))
        self._maybe_fail("begin")

    def commit_transaction(self, timeout: float = -1) -> None:
        self.calls.append(("commit",))
        self._maybe_fail("commit")

    def abort_transaction(self, timeout: float = -1) -> None:
        self.calls.append(("abort",))

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float = -1
    ) -> None:
        self.calls.append(("send_offsets",))

    def names(self) -> list[str]:
        """Each call as one word: produce calls by the topic they wrote."""
        return [c[1] if c[0] == "produce" else c[0] for c in self.calls]
