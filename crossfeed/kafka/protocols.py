"""The parts of confluent-kafka's clients the hot path uses, as typing Protocols.

The puller's tasks (services/puller/task.py, copies.py) and the ordered Kafka sink's
transaction code (services/sink/kafka/sink.py) are typed against these rather than
against ``confluent_kafka.Producer`` and friends, so their scheduling — what is produced
in which transaction, when it commits, what a fenced or failed call leads to — can be
unit-tested with small fakes (tests/support/kafka_fakes.py). What Kafka itself does
is only ever asserted against real brokers (tests/integration).

The real classes satisfy these Protocols: the ``TYPE_CHECKING`` block at the end makes
mypy check that, so a confluent-kafka upgrade that changes a signature fails ``make lint``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

Header = tuple[str, bytes | None]


class Message(Protocol):
    """A consumed record, or a delivery report, whose ``error()`` is None.

    confluent-kafka types topic, partition and offset as optional because an error event
    has none; crossfeed drops error events before anything reads them (the reader loops),
    so here they are plain values. A consumed record's headers are a list of
    (name, bytes) pairs or None."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[Header] | None: ...
    def timestamp(self) -> tuple[int, int]: ...


DeliveryCallback = Callable[[KafkaError | None, Message], None]
"""on_delivery: (error or None, the delivered record)."""


class Producer(Protocol):
    """What writing records needs (an idempotent producer)."""

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: Callable[[Any, Any], None] | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None: ...
    def poll(self, timeout: float = -1) -> int: ...
    def flush(self, timeout: float = -1) -> int: ...
    def purge(
        self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True
    ) -> None: ...


class TransactionalProducer(Producer, Protocol):
    """A producer with a ``transactional.id`` whose ``init_transactions`` has run."""

    def begin_transaction(self) -> None: ...
    def commit_transaction(self, timeout: float = -1) -> None: ...
    def abort_transaction(self, timeout: float = -1) -> None: ...
    def send_offsets_to_transaction(
        self, positions: list[KafkaTopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None: ...


class GroupConsumer(Protocol):
    """What a consume-transform-produce loop asks of its group consumer besides reading:
    the group's metadata for the transaction, its committed offsets, and rewinding."""

    def consumer_group_metadata(self) -> Any: ...
    def committed(
        self, partitions: list[KafkaTopicPartition], timeout: float = -1
    ) -> list[KafkaTopicPartition]: ...
    def seek(self, partition: KafkaTopicPartition) -> None: ...
    def get_watermark_offsets(
        self, partition: KafkaTopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]: ...


if TYPE_CHECKING:  # mypy checks that confluent-kafka's classes satisfy the Protocols
    import confluent_kafka

    def _conforms(
        producer: confluent_kafka.Producer, consumer: confluent_kafka.Consumer
    ) -> tuple[TransactionalProducer, GroupConsumer]:
        return producer, consumer
