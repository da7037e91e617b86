"""Which source topics a feed copies, and their target topics made ready.

Every ``topic_refresh_s`` the puller lists the source cluster's topics, selects the
feed's ones (names or regexes, minus exclusions, never internal topics), and makes
sure each has a target topic: created with the source's partition count and
topic-level configs if missing (all of a round's new topics at once), grown to the
source's partition count when the source gained partitions (a target with more stays as
it is); refused — the feed goes into the error state with a message saying what to do —
if the target cluster will not create or grow it, or if the rename format gives no legal
name for it. Such a topic waits (looked at again every round); the others are
copied meanwhile. An ordered feed has no per-topic targets (its changes go to
``_crossfeed.<feed>.changes``, the sink writes the one target topic): its matching
source partitions are ready at once, and ``listed_at_us`` says until when the feed's
partitions are known (an ordered feed's resolved_ts never passes it: a topic created
later, or a partition added later, cannot hold a change the feed has already resolved).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from crossfeed.core import topic_configs
from crossfeed.core.partitions import TopicPartition, grow_refused, partitions_to_add
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import topics as kafka_topics

log = logging.getLogger(__name__)


@dataclass
class Discovery:
    feed: FeedSpec
    source: AdminClient
    target: AdminClient
    ready: dict[str, int] = field(default_factory=dict)  # source topic -> partitions
    errors: dict[str, str] = field(default_factory=dict)  # source topic -> error message
    # Selected source topics whose target topic exists but does not answer yet (just
    # created, leaders being elected): the puller looks again soon, not a whole
    # topic_refresh_s later (a new topic's first seconds went uncopied).
    waiting: set[str] = field(default_factory=set)
    # Topic configs a target topic never takes from its source (core/topic_configs.py).
    excluded: topic_configs.Excluded = field(default_factory=topic_configs.Excluded)
    # Source topics copied before and no longer on the source: their targets are kept.
    deleted: set[str] = field(default_factory=set)
    # When the last listing that succeeded began (µs since the epoch): every source topic
    # and partition created before it is among ``ready`` (or waiting, or in error).
    listed_at_us: int = 0

    def refresh(self) -> set[TopicPartition]:
        """Look again; returns source partitions that became ready since the last call."""
        listing_at_us = int(time.time() * 1_000_000)
        source_counts = kafka_topics.partition_counts(self.source)
        ordered = self.feed.mode == "ordered"
        target_counts = {} if ordered else kafka_topics.partition_counts(self.target)
        new: set[TopicPartition] = set()
        self.waiting.clear()
        selected = self.feed.read_topics(source_counts)
        for gone in set(self.errors) - set(selected):  # deleted or no longer selected
            del self.errors[gone]
        deleted = {t for t in self.ready if t not in source_counts}
        for topic in sorted(deleted - self.deleted):
            log.warning(
                "feed %s: source topic %s was deleted; its target topic is kept",
                self.feed.name,
                topic,
            )
        self.deleted = deleted
        changed = [topic for topic in selected if self.ready.get(topic) != source_counts[topic]]
        if ordered:
            for topic in changed:
                before = self.ready.get(topic, 0)
                self.ready[topic] = source_counts[topic]
                new.update(TopicPartition(topic, p) for p in range(before, source_counts[topic]))
            self.listed_at_us = listing_at_us
            return new
        targets = self._target_names(changed)
        created = self._create_targets(
            [t for t in targets if targets[t] not in target_counts], targets, source_counts
        )
        grow: dict[str, tuple[str, int]] = {}  # source topic -> its target, fewer partitions
        ready: list[str] = []
        for topic, target_topic in targets.items():
            partitions = source_counts[topic]
            outcome = created.get(topic)
            if target_topic in target_counts:
                target_partitions = target_counts[target_topic]
            elif isinstance(outcome, KafkaException):
                self._error(topic, f"cannot create target topic {target_topic}: {outcome}")
                continue
            elif outcome:
                target_partitions = partitions
            else:
                # It exists after all (created since the listing, or still electing
                # leaders): ask for its own partition count rather than assume ours.
                counted = kafka_topics.partition_count(self.target, target_topic)
                if counted is None:
                    self.waiting.add(topic)  # not readable yet: looked at again soon
                    continue
                target_partitions = counted
            if partitions_to_add(partitions, target_partitions):
                grow[topic] = (target_topic, target_partitions)
                continue
            ready.append(topic)
        ready += self._grow(grow, source_counts)
        for topic in ready:
            partitions = source_counts[topic]
            if topic in self.errors:
                log.info("feed %s: topic %s is fine again", self.feed.name, topic)
                del self.errors[topic]
            before = self.ready.get(topic, 0)
            self.ready[topic] = partitions
            new.update(TopicPartition(topic, p) for p in range(before, partitions))
            if before == 0:
                log.info(
                    "feed %s: copying %s (%d partitions) to %s",
                    self.feed.name,
                    topic,
                    partitions,
                    targets[topic],
                )
            elif partitions > before:
                log.info(
                    "feed %s: %s gained partitions %d-%d at the source; copying them from "
                    "their first offset",
                    self.feed.name,
                    topic,
                    before,
                    partitions - 1,
                )
        return new

    def _target_names(self, topics: list[str]) -> dict[str, str]:
        """source topic -> its target topic, for those the rename format gives a legal
        name; the others are the feed's errors (a puller that stopped on one copied
        nothing, restart after restart)."""
        names: dict[str, str] = {}
        for topic in topics:
            try:
                names[topic] = self.feed.target_topic(topic)
            except ValueError as err:
                self._error(topic, str(err))
        return names

    def _grow(self, grow: dict[str, tuple[str, int]], source_counts: dict[str, int]) -> list[str]:
        """Add partitions to target topics that have fewer than their source (one request
        for all); returns the source topics whose targets have enough now, the others are
        the feed's errors (the target refused: no Alter right, a policy)."""
        wanted: dict[str, int] = {}
        for topic, (target, _) in grow.items():
            wanted[target] = max(wanted.get(target, 0), source_counts[topic])
        try:
            outcome = kafka_topics.add_partitions(self.target, wanted)
        except RuntimeError as err:  # grown, but not in the metadata yet: next round
            log.warning("feed %s: %s", self.feed.name, err)
            return []
        grown: list[str] = []
        for topic, (target, had) in grow.items():
            refused = outcome[target]
            if refused is None:
                log.info(
                    "feed %s: target topic %s grown from %d to %d partitions, as its source %s",
                    self.feed.name,
                    target,
                    had,
                    source_counts[topic],
                    topic,
                )
                grown.append(topic)
            else:
                reason = refused.args[0].str() if refused.args else str(refused)
                self._error(
                    topic,
                    grow_refused(
                        source_counts[topic], had, reason, topic=topic, target_topic=target
                    ),
                )
        return grown

    def _create_targets(
        self, topics: list[str], targets: dict[str, str], source_counts: dict[str, int]
    ) -> dict[str, bool | KafkaException]:
        """Create the target topics of source ``topics`` — configs asked for and topics
        created in one request each, however many (1,000 new topics one at a time took
        ~40 s) — source topic -> created (True), existed (False) or why not."""
        configs = kafka_topics.overridden_configs_of(self.source, topics)
        outcome: dict[str, bool | KafkaException] = {}
        specs: dict[str, kafka_topics.NewTopicSpec] = {}
        sources: dict[str, str] = {}  # target topic -> the source topic it is created for
        for topic in topics:
            config, target_topic = configs[topic], targets[topic]
            if isinstance(config, KafkaException):
                outcome[topic] = config  # the source topic went away, say
            elif target_topic in specs:
                outcome[topic] = False  # two source topics, one target: counted after
            else:
                specs[target_topic] = kafka_topics.NewTopicSpec(
                    target_topic, source_counts[topic], topic_configs.synced(config, self.excluded)
                )
                sources[target_topic] = topic
        made = kafka_topics.ensure_topics(self.target, list(specs.values()))
        outcome.update((sources[name], result) for name, result in made.items())
        return outcome

    def notices(self) -> list[str]:
        """What the status says without the feed being in error: source topics deleted
        (their targets are kept)."""
        return [
            f"source topic {topic} was deleted; its target topic "
            f"{self._target_or_same(topic)} is kept (a mirror is also a backup)"
            for topic in sorted(self.deleted)
        ]

    def copied(self) -> dict[str, str]:
        """Source topic -> target topic, of the topics copied now (mirror feeds)."""
        return {t: self.feed.target_topic(t) for t in sorted(self.ready) if t not in self.deleted}

    def _target_or_same(self, topic: str) -> str:
        try:
            return self.feed.target_topic(topic)
        except ValueError:
            return topic

    def _error(self, topic: str, problem: str) -> None:
        if self.errors.get(topic) != problem:
            log.error("feed %s: %s", self.feed.name, problem)
        self.errors[topic] = problem

    def retarget(self, feed: FeedSpec) -> None:
        """Select and route by an updated feed from the next refresh on: every topic is
        looked at again (a new rename format needs its target topics), and one no longer
        selected leaves ``partitions()`` (its running task keeps it until it restarts)."""
        self.feed = feed
        self.ready.clear()
        self.errors.clear()
        self.deleted = set()  # replaced, not cleared: the heartbeat thread reads notices()

    def partitions(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, n in self.ready.items() for p in range(n)}

    @property
    def state(self) -> str:
        return "error" if self.errors else "normal"

    @property
    def last_error(self) -> str | None:
        return "; ".join(self.errors[t] for t in sorted(self.errors)) or None
