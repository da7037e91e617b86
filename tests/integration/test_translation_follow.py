"""A translator's tail of a topic (crossfeed/translation/follow.py) on a real broker: after
``wait_read_to_end`` says yes, every record the topic held when it was asked is in the
book — what a failover relies on for the commits the client library recorded on dc-b a
moment before dc-a was lost."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.translation.follow import Follower

pytestmark = [pytest.mark.integration]


class Keys:
    """A book that keeps every key it is given."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def apply(self, key: Any, value: bytes | None) -> None:
        self.keys.append(key)


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
@pytest.mark.parametrize("burst", [1, 3_000])
def test_what_was_written_before_the_wait_is_read_when_it_returns(
    clusters, topic_factory, producer_factory, unique, burst, transactional
):
    """Transactional: each partition ends with a commit marker, an offset no record
    holds — the wait must still end."""
    topic = topic_factory(clusters.b, partitions=3)
    follower = Follower(clusters.b.config, topic, Keys(), "test-tail").start()
    try:
        assert follower.wait(30)
        conf = {"transactional.id": unique("tail-txn")} if transactional else {}
        producer = producer_factory(clusters.b, **conf)
        if transactional:
            producer.init_transactions(30)
        for round_ in range(3):  # the tail is live between rounds: each wait has new ends
            if transactional:
                producer.begin_transaction()
            for i in range(burst):
                producer.produce(topic, key=f"{round_}-{i}".encode(), partition=i % 3)
            if transactional:
                producer.commit_transaction(30)
            producer.flush(30)
            assert follower.wait_read_to_end(30)
            with follower.locked() as book:
                assert len(book.keys) == burst * (round_ + 1)
    finally:
        follower.stop()


def test_a_topic_that_is_not_there_has_nothing_to_wait_for(clusters, unique):
    follower = Follower(clusters.b.config, unique("absent"), Keys(), "test-tail").start()
    try:
        assert follower.wait(30)  # the first look found no topic
        assert follower.wait_read_to_end(1)
    finally:
        follower.stop()
