"""Metrics of offset translation (served by the coordinator's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

TICKS = Counter(
    "crossfeed_coordinator_translation_ticks_total", "Translation rounds run", ("feed",)
)
ROUND_SECONDS = Histogram(
    "crossfeed_coordinator_translation_round_seconds",
    "Duration of translation rounds (every group of the feed translated once)",
    ("feed",),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
PARTITIONS = Gauge(
    "crossfeed_coordinator_translated_partitions",
    "Group partitions translated in the last round, by method (offset-sync and header are exact)",
    ("feed", "method"),
)
GAP_RECORDS = Gauge(
    "crossfeed_coordinator_translation_gap_records",
    "Source records groups consumed past the replicated frontier, summed over their "
    "partitions (upper bound where counted in offsets)",
    ("feed",),
)
DELETED_RECORDS = Gauge(
    "crossfeed_coordinator_translation_deleted_records",
    "Offsets deleted at the source before they were copied that group positions point "
    "into, summed over group partitions (not counted once acknowledged with ack-gap)",
    ("feed",),
)
HELD_PARTITIONS = Gauge(
    "crossfeed_coordinator_translation_held_partitions",
    "Group partitions not moved because their position is in records deleted at the "
    "source (gap.policy=stop, until acknowledged)",
    ("feed",),
)
CHECKPOINTS = Counter(
    "crossfeed_coordinator_group_checkpoints_total",
    "GroupCheckpoint records written to _crossfeed.checkpoints",
    ("feed",),
)
OFFSETS_COMMITTED = Counter(
    "crossfeed_coordinator_group_offsets_committed_total",
    "Destination group partitions moved to their translated offsets",
    ("feed",),
)
SOURCE_UP = Gauge(
    "crossfeed_coordinator_translation_source_up",
    "1 while the feed's source cluster answers the translator, else 0",
    ("feed",),
)
ARRIVALS = Counter(
    "crossfeed_coordinator_commits_translated_on_arrival_total",
    "Group commits read from the source's __consumer_offsets and translated as they arrived",
    ("feed",),
)
COMMITS_STREAMED = Gauge(
    "crossfeed_coordinator_commits_streamed",
    "1 while the feed's translator follows group commits in __consumer_offsets, "
    "0 while it lists group offsets every round (see crossfeed status for why)",
    ("feed",),
)
