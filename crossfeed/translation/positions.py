"""Where one feed's groups are on the source, as the translator knows them: the commits
read or listed (``source.py``), newer ones from the consumer timestamps and from the
commits recorded on the target, and — after a restart — the checkpoints it wrote before."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from crossfeed.translation.checkpoints import FEED_ROW, StoredCheckpoint
from crossfeed.translation.commit_stream import CommitStream
from crossfeed.translation.feed_books import FeedBooks
from crossfeed.translation.kafka_io import TP
from crossfeed.translation.latest import COMMIT_LOG, Known
from crossfeed.translation.results import PartitionTranslation
from crossfeed.translation.rpo import position_rpo
from crossfeed.translation.source import SourceView, Where, now_ms


class GroupPositions:
    """The positions of one feed's groups (the owner locks)."""

    def __init__(self, books: FeedBooks, source: SourceView, commits: CommitStream) -> None:
        self.books = books
        self.source = source
        self.commits = commits

    def merged(self) -> dict[Where, Known]:
        """Every wanted group partition's newest known position."""
        return self.source.merged(
            self.books.stamp_items(),
            recorded=self.books.recorded_items(self.source.cluster_id),
        )

    def of_group(self, group: str) -> dict[TP, Known]:
        """One group's positions, listed now if the source answers (filters aside)."""
        return self.source.group(
            group, self.books.stamp_items(), self.books.recorded_items(self.source.cluster_id)
        )

    def partitions(self) -> set[TP]:
        """The partitions worth asking the source about: copied, or committed on."""
        tps = {(e.topic, e.partition) for e in self.books.entries(self.source.cluster_id)}
        for offsets in self.source.positions.values():
            tps.update(offsets)
        return tps

    def with_rpo(
        self, results: Iterable[PartitionTranslation], source_reachable: bool
    ) -> list[PartitionTranslation]:
        """The translations with their position RPO (``rpo.position_rpo``) as of now."""
        now = now_ms()
        frontiers = {
            (e.topic, e.partition): e.frontier() for e in self.books.entries(self.source.cluster_id)
        }
        # Commits read from the log are known up to the log's last read, however old.
        read_at = self.commits.read_at_ms
        out = []
        for r in results:
            frontier = frontiers.get((r.topic, r.partition))
            known_until = r.known_at_ms
            if r.known_from == COMMIT_LOG:
                known_until = max(known_until, read_at)
            position = position_rpo(
                source_reachable=source_reachable,
                exact=r.exact,
                method=r.method,
                target_offset=r.target_offset,
                target_frontier=frontier.target_next if frontier is not None else None,
                known_from=r.known_from,
                past_recorded=r.past_recorded,
                known_until_ms=known_until,
                committed_at_ms=r.committed_at_ms,
                now_ms=now,
            )
            out.append(replace(r, position=position))
        return out

    def seed(self, rows: dict[tuple[str, str, int], StoredCheckpoint]) -> None:
        """Start from the positions and source ends the feed's checkpoints hold, so a
        coordinator that (re)starts while the source is down still knows them."""
        for (group, topic, partition), row in rows.items():
            tp = (topic, partition)
            if group == FEED_ROW:
                self.source.remember_end(tp, row.source_offset, row.translated_at_ms)
                if row.source_log_start >= 0:
                    self.source.starts.setdefault(tp, row.source_log_start)
            else:
                self.source.remember(group, tp, row.source_offset, row.translated_at_ms)
            if self.source.cluster_id is None and row.source_cluster:
                self.source.cluster_id = row.source_cluster
