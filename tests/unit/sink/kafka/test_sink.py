"""The Kafka sink's transactions against fakes of the Protocols in
crossfeed/kafka/protocols.py (tests/support/kafka_fakes.py): whole source transactions
with the input offset; abort and rewind of one cut short. Nothing here asserts how Kafka
behaves: tests/integration/test_ordered_kafka_sink.py runs the same code against real
brokers."""

from __future__ import annotations

from typing import Any

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.kafka.protocols import Header
from crossfeed.services.sink.kafka.sink import KafkaSink
from crossfeed.wire import headers
from tests.support.kafka_fakes import FakeProducer, FakeRecord


class FakeGroupConsumer:
    """The group consumer's side of consume-transform-produce: metadata, seeks."""

    def __init__(self) -> None:
        self.seeks: list[int] = []

    def consumer_group_metadata(self) -> Any:
        return "group-metadata"

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return partitions

    def seek(self, partition: Any) -> None:
        self.seeks.append(partition.offset)

    def get_watermark_offsets(
        self, partition: Any, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        return (0, 0)


class SortedRecord(FakeRecord):
    def __init__(self, offset: int, hdrs: list[Header]) -> None:
        super().__init__("_crossfeed.s.sorted", 0, offset, b"change")
        self._hdrs = hdrs

    def headers(self) -> list[Header] | None:
        return self._hdrs


def _marker(kind: str, txn: str, ts: int, count: int) -> list[Header]:
    return [
        (headers.TYPE, kind.encode()),
        (headers.COMMIT_TS, str(ts).encode()),
        (headers.TXN, f"{txn}/0/{count}".encode()),
    ]


def _data(txn: str, ts: int, seq: int, count: int) -> list[Header]:
    return [(headers.COMMIT_TS, str(ts).encode()), (headers.TXN, f"{txn}/{seq}/{count}".encode())]


def _sink() -> tuple[Any, FakeProducer, FakeGroupConsumer]:
    settings = Settings(clusters={"dc-b": {"bootstrap.servers": "127.0.0.1:1"}})
    feed = FeedSpec.model_validate(
        {"name": "s", "source": "dc-a", "sink-uri": "kafka://dc-b/out", "topics": ["bank"],
         "mode": "ordered"}
    )  # fmt: skip
    sink = KafkaSink(settings, feed, "sink-1", {})
    producer, consumer = FakeProducer(), FakeGroupConsumer()
    sink.producer, sink.consumer = producer, consumer
    sink.owner, sink.max_message_bytes, sink.interval_s = True, 1 << 20, 0.0
    return sink, producer, consumer


def test_the_sink_commits_whole_source_transactions_with_the_input_offset():
    sink, producer, _ = _sink()
    stream = [
        _marker("begin", "t1", 100, 2),
        _data("t1", 100, 1, 2),
        _data("t1", 100, 2, 2),
        _marker("commit", "t1", 100, 2),
    ]
    for offset, hdrs in enumerate(stream):
        assert sink._handle(SortedRecord(offset, hdrs))
    assert producer.names() == ["begin", "out", "out", "send_offsets", "commit"]
    assert sink.committed_offset == 4  # the next sorted record to read
    assert sink.committed.position.txn == "t1"


def test_the_sink_aborts_and_rewinds_a_source_transaction_cut_short():
    sink, producer, consumer = _sink()
    stream = [
        _marker("begin", "t1", 100, 2),
        _data("t1", 100, 1, 2),
        _marker("begin", "t2", 200, 1),  # t1 never completes: the sorter cut it short
    ]
    results = [sink._handle(SortedRecord(offset, hdrs)) for offset, hdrs in enumerate(stream)]
    assert results == [True, True, False]  # rewound: the batch is read again
    assert producer.names() == ["begin", "out", "flush", "abort"]
    assert consumer.seeks == [0]  # back to the committed offset (the start: nothing yet)
