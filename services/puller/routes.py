"""Where a mirror feed's source partitions are copied to: their target partitions, from
the facts of the target topics (an ordered feed copies nothing: no route)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException

from crossfeed.core.partitions import TopicPartition
from crossfeed.feeds import FeedSpec
from crossfeed.kafka.targets import TargetTopics
from crossfeed.services.puller.copies import Route

log = logging.getLogger(__name__)


class Routes:
    def __init__(self, feed: FeedSpec, target_alias: str) -> None:
        self.feed = feed
        self.target_alias = target_alias
        self.targets: TargetTopics | None = None  # the target's facts, once it answered
        # Mirror partitions whose target partition has another writer: a delivery report
        # per copy from now on (copies.Block).
        self.exact: set[TopicPartition] = set()

    @property
    def copying(self) -> bool:
        return self.feed.mode != "ordered" and self.targets is not None

    def prefetch(self, tps: Iterable[TopicPartition]) -> None:
        """The target topics' facts that :meth:`route` needs, asked for all at once
        (best effort: what is not learnt here, route asks for itself)."""
        if not self.copying:
            return
        assert self.targets is not None
        try:
            self.targets.prefetch({self.feed.target_topic(tp.topic) for tp in tps})
        except KafkaException as err:
            log.debug("target topics not prefetched: %s", err)

    def route(self, tp: TopicPartition) -> Route | None:
        """Where a mirror feed's source partition is copied to (None: an ordered feed);
        KafkaException while the target topic is not there or too small (the task is
        started again later; discovery creates and checks target topics)."""
        if self.feed.mode == "ordered":
            return None
        assert self.targets is not None
        name = self.feed.target_topic(tp.topic)
        target = self.targets.get(name, tp.partition)
        if target is None or tp.partition >= target.partitions:
            raise KafkaException(
                KafkaError(
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    f"target partition {name}/{tp.partition} for {tp} does not exist (yet) on "
                    f"{self.target_alias}",
                )
            )
        return Route(name, tp.partition, target.max_message_bytes, exact=tp in self.exact)

    def all(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Route | None]:
        return {tp: self.route(tp) for tp in tps}
