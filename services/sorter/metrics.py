"""The sorter's metrics (names as docs/design.md, Interfaces: crossfeed_sorter_<what>_<unit>)."""

from prometheus_client import Counter, Gauge, Histogram

FEED = ("feed",)
PARTITION = ("feed", "topic", "partition")

EVENTS = Counter(
    "crossfeed_sorter_events_released_total", "Changes released into the sorted topic", FEED
)
TRANSACTIONS = Counter(
    "crossfeed_sorter_transactions_total", "Source transactions released (begin..commit)", FEED
)
DLQ = Counter(
    "crossfeed_sorter_dlq_records_total",
    "Changes sent to _crossfeed.dlq (incomplete transactions, late or unreadable changes)",
    FEED,
)
BATCHES = Counter("crossfeed_sorter_batches_total", "Micro-batches processed", FEED)
INPUT = Counter("crossfeed_sorter_input_records_total", "Records read from the changes topic", FEED)
BATCH_SECONDS = Histogram(
    "crossfeed_sorter_batch_seconds",
    "Time of one micro-batch in the driver's batch function",
    FEED,
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
RESOLVED_TS = Gauge(
    "crossfeed_sorter_resolved_timestamp_seconds",
    "The feed's global resolved_ts: everything at or below it is in the sorted topic",
    FEED,
)
PARTITION_RESOLVED_TS = Gauge(
    "crossfeed_sorter_partition_resolved_timestamp_seconds",
    "resolved_ts of one source partition, as the sorter has read it",
    PARTITION,
)
LAGGARD_SECONDS = Gauge(
    "crossfeed_sorter_laggard_seconds",
    "For a source partition holding the feed back: seconds since its resolved_ts last "
    "advanced (0 for the others)",
    PARTITION,
)
PENDING = Gauge(
    "crossfeed_sorter_pending_events",
    "Changes kept on disk not yet released (rows of the live pending segments)",
    FEED,
)
SEGMENTS = Gauge("crossfeed_sorter_pending_segments", "Live pending segments on disk", FEED)
