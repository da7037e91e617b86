"""What the last translation of one feed found, for people: the group positions in records
the source deleted before they were copied (rule 0, ``crossfeed status``) and the round's
gauges."""

from __future__ import annotations

from crossfeed.core import gaps
from crossfeed.feeds import FeedSpec
from crossfeed.translation import metrics
from crossfeed.translation.results import PartitionTranslation, TickReport
from crossfeed.translation.rules import Method
from crossfeed.translation.source import Where


def order(r: PartitionTranslation) -> Where:
    return (r.group, r.topic, r.partition)


class Findings:
    """The notices and gauges of one feed's translations."""

    def __init__(self, feed: FeedSpec) -> None:
        self.feed = feed
        self._notices: list[str] = []  # replaced, never changed: read without a lock

    def notices(self) -> list[str]:
        return list(self._notices)

    def note_deleted(self, results: list[PartitionTranslation]) -> None:
        """Keep the notices of ``results`` (every translation known now)."""
        acked = gaps.acknowledged(self.feed.config.gap_acknowledged)
        found = [r for r in sorted(results, key=order) if r.key not in acked]
        self._notices = [line for r in found if (line := r.lost_line(self.feed.name)) is not None]

    def publish(
        self, results: list[PartitionTranslation], report: TickReport, source_up: bool
    ) -> None:
        """The gauges of a round."""
        name = self.feed.name
        metrics.TICKS.labels(name).inc()
        metrics.ROUND_SECONDS.labels(name).observe(report.took_s)
        metrics.SOURCE_UP.labels(name).set(1 if source_up else 0)
        metrics.COMMITS_STREAMED.labels(name).set(1 if report.commits == "stream" else 0)
        for method in Method:
            metrics.PARTITIONS.labels(name, method.value).set(
                sum(1 for r in results if r.method == method.value)
            )
        metrics.GAP_RECORDS.labels(name).set(sum(max(r.gap, 0) for r in results))
        acked = gaps.acknowledged(self.feed.config.gap_acknowledged)
        lost = [r.lost.count for r in results if r.lost is not None and r.key not in acked]
        metrics.DELETED_RECORDS.labels(name).set(sum(lost))
        metrics.HELD_PARTITIONS.labels(name).set(sum(1 for r in results if r.held))
