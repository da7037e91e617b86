"""Transaction scheduling of the hot path against fakes of the Protocols in
crossfeed/kafka/protocols.py: a mirror puller task (what goes into which transaction in
which order; what a fenced, failing or interleaved commit leads to) and the ordered Kafka
sink (whole source transactions with the input offset; abort and rewind of one cut short).
Nothing here asserts how Kafka behaves: tests/integration/test_mirror.py and
test_ordered_kafka_sink.py run the same code against real brokers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from crossfeed.core.partitions import TopicPartition
from crossfeed.core.task_txn import Next, Outcome
from crossfeed.feeds import FeedSpec
from crossfeed.kafka.protocols import Header, Message, TransactionalProducer
from crossfeed.services.puller.copies import Route
from crossfeed.services.puller.task import FeedContext, PullerTask, TxnFailure
from crossfeed.wire import codec, headers, topics

pytestmark = pytest.mark.unit

TP = TopicPartition("orders", 2)
# Producer.produce's parameters after the topic, in order (crossfeed/kafka/protocols.py).
PRODUCE_ARGS = ("value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")
CHANGES = "_crossfeed.f.changes"


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


def _task(producer: TransactionalProducer, max_message_bytes: int = 1 << 20) -> PullerTask:
    feed = FeedSpec.model_validate(
        {"name": "f", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["orders"]}
    )
    ctx = FeedContext(feed, "src", "dst", CHANGES, 1000, 1 << 20, 1 << 20, 0.1, 1.0, 1.0)
    task = PullerTask(ctx, 0, producer)
    task.add_partition(TP, 0, Route("orders", TP.partition, max_message_bytes))
    return task


def _read(task: PullerTask, offsets: range, value: bytes = b"v") -> None:
    state = task.partitions[TP]
    for offset in offsets:
        task.add(FakeRecord(TP.topic, TP.partition, offset, value), state)


def _commit(task: PullerTask) -> TxnFailure | None:
    return task.commit({TP: task.position(TP)}, set())


def _syncs(producer: FakeProducer) -> list[dict[str, Any]]:
    return [
        codec.decode("OffsetSync", c[3])
        for c in producer.calls
        if c[0] == "produce" and c[1] == topics.OFFSET_SYNCS
    ]


def test_one_transaction_holds_copies_then_the_mark_then_the_offset_syncs():
    producer = FakeProducer()
    producer.logs[("orders", 2)] = 40  # the target partition already holds 40 records
    task = _task(producer)
    _read(task, range(3))
    assert _commit(task) is None
    assert producer.names() == [
        "begin",
        *["orders"] * 3,  # the copies, same partition number
        CHANGES,  # the mark: the task's position, after what it covers
        "flush",  # every delivery report is in before the OffsetSyncs are written
        topics.OFFSET_SYNCS,
        "commit",
    ]
    copies = [c for c in producer.calls if c[0] == "produce" and c[1] == "orders"]
    assert {c[2] for c in copies} == {2}
    assert (headers.SRC, b"src/orders/2/1") in copies[1][4]
    mark = codec.decode("ResolvedMark", producer.calls[4][3])
    assert mark["next_offset"] == 3
    (sync,) = _syncs(producer)
    assert (sync["source_start"], sync["source_end"], sync["target_start"]) == (0, 2, 40)
    assert task.position(TP) == 3


def test_records_read_after_the_seal_wait_for_the_next_transaction():
    producer = FakeProducer()
    task = _task(producer)
    _read(task, range(2))
    assert task.seal({TP: task.position(TP)}, set()) is None
    _read(task, range(2, 4))  # read while the commit is under way
    assert task.finish() is None
    task.committed()
    first = producer.names()
    assert first.count("orders") == 2 and first[-1] == "commit"
    assert _commit(task) is None
    second = producer.names()[len(first) :]
    assert second[:3] == ["begin", "orders", "orders"] and second[-1] == "commit"
    assert [s["source_start"] for s in _syncs(producer)] == [0, 2]


def test_copies_interleaved_by_another_writer_are_redone_one_by_one():
    producer = FakeProducer()
    producer.interleave = True
    task = _task(producer)
    _read(task, range(3))
    failure = _commit(task)
    assert failure is not None and failure.outcome is Outcome.FAILED
    assert "another writer interleaved" in failure.detail
    assert task.partitions[TP].route is not None and task.partitions[TP].route.exact
    assert "commit" not in producer.names()  # the transaction is not committed


def test_a_fenced_commit_drops_the_task_and_a_retriable_one_is_retried():
    producer = FakeProducer()
    producer.fail["commit"] = [KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True)]
    task = _task(producer)
    _read(task, range(1))
    assert _commit(task) is None
    assert producer.names().count("commit") == 2  # retried once, then committed

    producer.fail["commit"] = [KafkaError(KafkaError._FENCED, "fenced")]
    _read(task, range(1, 2))
    assert task.seal({TP: task.position(TP)}, set()) is None
    fenced = task.finish()
    assert fenced is not None and fenced.outcome is Outcome.FENCED
    assert task.failed(fenced).next is Next.DROP


def test_a_producer_fenced_during_the_flush_is_a_fenced_failure_not_a_crash():
    producer = FakeProducer()
    task = _task(producer)
    _read(task, range(3))
    assert task.seal({TP: task.position(TP)}, set()) is None
    producer.fatal_in_flush = KafkaError(
        KafkaError._FENCED, "fenced by a newer instance", fatal=True
    )
    fenced = task.finish()
    assert fenced is not None and fenced.outcome is Outcome.FENCED, fenced
    assert "fenced by a newer instance" in fenced.detail
    assert task.failed(fenced).next is Next.DROP
    task.close()  # flushes again: the same error, caught
    assert "commit" not in producer.names()


def test_a_record_too_large_for_the_target_goes_to_the_dead_letter_topic():
    producer = FakeProducer()
    task = _task(producer, max_message_bytes=1000)
    _read(task, range(1), value=b"x" * 70_000)  # beyond the size slack: checked one by one
    _read(task, range(1, 2), value=b"small")
    assert _commit(task) is None
    written = [c for c in producer.calls if c[0] == "produce" and c[1] != CHANGES]
    assert sorted(c[1] for c in written) == sorted([topics.DLQ, "orders", topics.OFFSET_SYNCS])
    (copy,) = [c for c in written if c[1] == "orders"]
    assert (headers.SRC, b"src/orders/2/1") in copy[4]
    (sync,) = _syncs(producer)
    assert (sync["source_start"], sync["source_end"]) == (1, 1)


# -- the ordered Kafka sink's transactions ---------------------------------------------


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
    from crossfeed.config import Settings
    from crossfeed.services.sink.kafka.sink import KafkaSink

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


def test_a_send_refused_by_a_fenced_producer_is_a_returned_failure_that_drops_the_task():
    producer = FakeProducer()
    task = _task(producer)
    _read(task, range(2))  # add() only buffers: nothing is produced yet
    assert "orders" not in producer.names()
    producer.fail["produce"] = [KafkaError(KafkaError._FENCED, "fenced")]
    failure = task.send()
    assert failure is not None and failure.outcome is Outcome.FENCED
    assert task.failed(failure).next is Next.DROP
    assert "commit" not in producer.names()


def test_a_begin_that_keeps_failing_is_returned_and_the_task_restarts():
    producer = FakeProducer()
    producer.fail["begin"] = [KafkaError(KafkaError._TRANSPORT, "target gone")]
    task = _task(producer)
    _read(task, range(1))
    failure = task.send()
    assert failure is not None and failure.outcome is Outcome.FAILED
    assert "target gone" in failure.detail
    decision = task.failed(failure)
    assert decision.next is Next.RESTART and "target gone" in decision.reason
