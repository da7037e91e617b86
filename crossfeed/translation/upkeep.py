"""What a translator does now and then, besides translating: the feed's own per-partition
rows (every FEED_ROWS_EVERY_S) and dropping offset-sync runs no group needs any more
(every TRUNCATE_EVERY_S)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Final

from crossfeed.feeds import FeedSpec
from crossfeed.translation.destination import Destination
from crossfeed.translation.feed_books import FeedBooks
from crossfeed.translation.kafka_io import TP
from crossfeed.translation.latest import Known
from crossfeed.translation.recovery import RecoveryPoint
from crossfeed.translation.source import SourceView, Where

log = logging.getLogger(__name__)

FEED_ROWS_EVERY_S: Final = 5.0
TRUNCATE_EVERY_S: Final = 30.0


class Upkeep:
    """The periodic chores of one feed's translator (the owner locks)."""

    def __init__(
        self,
        feed: FeedSpec,
        books: FeedBooks,
        source: SourceView,
        destination: Destination,
        recovery: RecoveryPoint,
    ) -> None:
        self.feed = feed
        self.books = books
        self.source = source
        self.destination = destination
        self.recovery = recovery
        self._feed_rows_at = 0.0
        self._truncated_at = 0.0

    def feed_rows_due(self) -> bool:
        return time.monotonic() - self._feed_rows_at >= FEED_ROWS_EVERY_S

    def truncate_due(self) -> bool:
        return time.monotonic() - self._truncated_at >= TRUNCATE_EVERY_S

    def write_feed_rows(self) -> None:
        """The feed's own per-partition rows (source end, frontier, unreplicated)."""
        source_cluster = self.source.cluster_id or ""
        for row in self.recovery.rows(None, read_target=False, floors={}):
            if row.source_end is not None and row.target_frontier is not None:
                target = self.books.target_of(row.topic, row.partition)
                start = self.source.starts.get((row.topic, row.partition), -1)
                self.destination.feed_row(row, target, source_cluster, start)
        self.destination.flush()
        self._feed_rows_at = time.monotonic()

    def truncate(self, positions: Mapping[Where, Known]) -> None:
        """Drop runs below the lowest offset any group holds (or the log start)."""
        lowest: dict[TP, int] = {}
        for (_, t, p), known in positions.items():
            lowest[(t, p)] = min(lowest.get((t, p), known.offset), known.offset)
        dropped = 0
        with self.books.syncs.locked() as book:
            for entry in book.of_feed(self.feed.name):
                tp = (entry.topic, entry.partition)
                cut = lowest.get(tp, self.source.starts.get(tp, 0))
                if cut > 0:
                    dropped += book.truncate(self.feed.name, entry.topic, entry.partition, cut)
        if dropped:
            log.debug(
                "feed %s: dropped %d offset-sync runs no group needs", self.feed.name, dropped
            )
        self._truncated_at = time.monotonic()
