"""The tables one feed's translator reads, and what it asks of them.

Three followed topics (``follow.py``): the offset syncs on the target (where each source
offset was copied), the consumer timestamps on the source, and the commits the client
library's opt-in recorded on the target. A translator follows its own unless it was given
shared ones (the coordinator's, tests'); it stops only those it started.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from crossfeed.feeds import FeedSpec
from crossfeed.translation.books import RecordedBook, StampBook, SyncBook, SyncEntry
from crossfeed.translation.filters import TranslationFilter
from crossfeed.translation.follow import Follower, follow_recorded, follow_stamps, follow_syncs
from crossfeed.translation.kafka_io import TP
from crossfeed.translation.latest import Known
from crossfeed.translation.rules import ConsumerStamp
from crossfeed.translation.source import Where
from crossfeed.wire import topics

log = logging.getLogger(__name__)

RECORDED_WAIT_S: Final = 10.0
"""With the source down, the final round first waits (this long at most) until every
commit recorded on the destination so far is read: a failover is worth seconds, and a
commit it misses is a position it calls stale."""


class FeedBooks:
    """One feed's view of the offset syncs, consumer timestamps and recorded commits."""

    def __init__(
        self,
        feed: FeedSpec,
        translation_filter: TranslationFilter,
        source_conf: dict[str, Any],
        target_conf: dict[str, Any],
        *,
        syncs: Follower[SyncBook] | None = None,
        stamps: Follower[StampBook] | None = None,
        recorded: Follower[RecordedBook] | None = None,
    ) -> None:
        self.feed = feed
        self.filter = translation_filter
        self.source_conf = source_conf
        self.target_conf = target_conf
        self._own_syncs = syncs is None
        self._own_stamps = stamps is None
        self._own_recorded = recorded is None
        self._syncs = syncs
        self._stamps = stamps
        self._recorded = recorded

    def start(self) -> None:
        """Follow the tables not given; idempotent."""
        if self._syncs is None:
            self._syncs = follow_syncs(self.target_conf)
        if self._stamps is None:
            self._stamps = follow_stamps(self.source_conf)
        if self._recorded is None:
            self._recorded = follow_recorded(self.target_conf)

    def stop(self) -> None:
        """Stop following the tables this feed started (not the shared ones)."""
        if self._own_syncs and self._syncs is not None:
            self._syncs.stop()
        if self._own_stamps and self._stamps is not None:
            self._stamps.stop()
        if self._own_recorded and self._recorded is not None:
            self._recorded.stop()

    @property
    def syncs(self) -> Follower[SyncBook]:
        assert self._syncs is not None, "start() the translator first"
        return self._syncs

    @property
    def stamps(self) -> Follower[StampBook]:
        assert self._stamps is not None, "start() the translator first"
        return self._stamps

    @property
    def recorded(self) -> Follower[RecordedBook]:
        """Commits the client library's opt-in recorded on the target."""
        assert self._recorded is not None, "start() the translator first"
        return self._recorded

    def read_recorded_commits(self, target_alias: str) -> None:
        """The source is gone: the last commits recorded on the target may have been
        written a moment ago; wait (bounded) until they are read."""
        recorded = self._recorded
        if recorded is None or recorded.wait_read_to_end(RECORDED_WAIT_S):
            return
        log.warning(
            "feed %s: %s on %s not read up to now; translating from what was read",
            self.feed.name,
            topics.DESTINATION_TIMESTAMPS,
            target_alias,
        )

    def wanted(self, topic: str) -> bool:
        """The feed copies the topic and its translation filters keep it."""
        return self.feed.selector.selects(topic) and self.filter.topic(topic)

    def entries(self, source_cluster: str | None) -> list[SyncEntry]:
        """The feed's runs of wanted topics (of ``source_cluster`` when it is known)."""
        with self.syncs.locked() as book:
            entries = book.of_feed(self.feed.name)
        if source_cluster is not None:
            entries = [e for e in entries if e.source_cluster == source_cluster]
        return [e for e in entries if self.wanted(e.topic)]

    def source_clusters(self) -> set[str]:
        """The source clusters the feed's runs came from."""
        with self.syncs.locked() as book:
            return {e.source_cluster for e in book.of_feed(self.feed.name)}

    def target_of(self, topic: str, partition: int) -> TP:
        """Where the feed copies a source partition (its runs say, else its naming)."""
        with self.syncs.locked() as book:
            entry = book.get(self.feed.name, topic, partition)
            if entry is not None:
                return entry.target_topic, entry.target_partition
        return self.feed.target_topic(topic), partition

    def stamp_items(self) -> list[tuple[Where, ConsumerStamp]]:
        with self.stamps.locked() as book:
            return book.items()

    def recorded_items(self, source_cluster: str | None) -> list[tuple[Where, Known]]:
        with self.recorded.locked() as book:
            return book.of_cluster(source_cluster)
