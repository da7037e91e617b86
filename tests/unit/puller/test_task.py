"""A mirror puller task's transactions against fakes of the Protocols in
crossfeed/kafka/protocols.py (tests/support/kafka_fakes.py): what goes into which
transaction in which order; what a fenced, failing or interleaved commit leads to.
Nothing here asserts how Kafka behaves: tests/integration/test_mirror.py runs the same
code against real brokers."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from crossfeed.core.partitions import TopicPartition
from crossfeed.core.task_txn import Next, Outcome
from crossfeed.feeds import FeedSpec
from crossfeed.kafka.protocols import TransactionalProducer
from crossfeed.services.puller.copies import Route
from crossfeed.services.puller.task import PullerTask
from crossfeed.services.puller.task_state import FeedContext
from crossfeed.services.puller.txn_producer import TxnFailure
from crossfeed.wire import codec, headers, topics
from tests.support.kafka_fakes import FakeProducer, FakeRecord

pytestmark = pytest.mark.unit

TP = TopicPartition("orders", 2)
CHANGES = "_crossfeed.f.changes"


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
    assert (headers.PROV, b"src/orders/2/1") in copies[1][4]
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
    assert (headers.PROV, b"src/orders/2/1") in copy[4]
    (sync,) = _syncs(producer)
    assert (sync["source_start"], sync["source_end"]) == (1, 1)


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


class _Headed(FakeRecord):
    def __init__(self, offset: int, hdrs: list[Any]) -> None:
        super().__init__(TP.topic, TP.partition, offset, b"v")
        self._hdrs = hdrs

    def headers(self) -> list[Any] | None:
        return self._hdrs


def test_a_copy_whose_provenance_is_not_utf8_is_a_dead_letter_and_the_task_goes_on():
    """Not a task that fails on it for ever: the record goes to the DLQ with its reason and
    the next one is copied."""
    producer = FakeProducer()
    task = _task(producer)
    state = task.partitions[TP]
    task.add(_Headed(0, [(headers.PROV, b"\xff\xfe")]), state)
    task.add(_Headed(1, [(headers.HOPS, b"\xff")]), state)
    _read(task, range(2, 3))
    assert _commit(task) is None
    written = [c for c in producer.calls if c[0] == "produce" and c[1] != CHANGES]
    letters = [c for c in written if c[1] == topics.DLQ]
    assert [dict(c[4])["crossfeed-dlq-error-class"] for c in letters] == [b"BadProvenance"] * 2
    (copy,) = [c for c in written if c[1] == "orders"]
    assert (headers.PROV, b"src/orders/2/2") in copy[4]
    assert task.position(TP) == 3
