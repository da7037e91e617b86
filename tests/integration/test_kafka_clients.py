"""crossfeed/kafka/clients.py against a real broker: what its helpers promise about reads."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, TopicPartition

from crossfeed import positions
from crossfeed.kafka import clients

pytestmark = pytest.mark.integration


def test_read_batch_returns_with_the_first_record_and_takes_what_is_fetched_behind_it(
    clusters, topic_factory, producer_factory, consumer_factory
):
    topic = topic_factory(clusters.b)
    consumer = consumer_factory(clusters.b)
    consumer.assign([TopicPartition(topic, 0, 0)])
    assert clients.read_batch(consumer, 2000, 0.2) == []  # nothing there: waits, empty
    producer = producer_factory(clusters.b)
    producer.produce(topic, b"one")
    producer.flush(10)
    began = time.monotonic()
    first = clients.read_batch(consumer, 2000, 30.0)
    waited = time.monotonic() - began
    # consume(2000, 30) would sit out the whole 30 s for one record.
    assert [m.value() for m in first] == [b"one"] and waited < 15, waited
    for i in range(500):
        producer.produce(topic, b"%d" % i)
    producer.flush(10)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 500 and time.monotonic() < deadline:
        batch = clients.read_batch(consumer, 200, 1.0)
        assert len(batch) <= 200  # never more than asked
        got += [m.value() for m in batch if not m.error()]
    assert got == [b"%d" % i for i in range(500)]  # in order, none lost or twice


def test_reach_log_end_with_a_producer_fenced_meanwhile_fails_as_a_kafka_error(
    clusters, topic_factory
):
    """Two members opened the same puller task (a handoff after dc-b came back): the
    first one's producer is fenced by the second's init_transactions before it wrote
    its aborted record. Its opening must fail as a KafkaException, which the puller
    retries, not with the SystemError confluent-kafka raises from the delivery report,
    which ended the puller process."""
    topic = topic_factory(clusters.b)
    conf = clusters.b.config
    first = clients.transactional_producer(conf, f"fence-{topic}")
    second = clients.transactional_producer(conf, f"fence-{topic}")
    with pytest.raises(KafkaException) as raised:
        positions.reach_log_end(first, topic, 0, timeout_s=20)
    assert clients.is_fenced(raised.value.args[0]), raised.value
    positions.reach_log_end(second, topic, 0, timeout_s=20)  # the new owner goes on
