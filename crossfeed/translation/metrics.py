"""Metrics of offset translation (served by the coordinator's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

TICKS = Counter(
    "crossfeed_coordinator_translation_ticks_total", "Translation rounds run", ("feed",)
)
TICK_SECONDS = Gauge(
    "crossfeed_coordinator_translation_seconds", "Duration of the last translation round", ("feed",)
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
