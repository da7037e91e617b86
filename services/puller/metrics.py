"""The puller's metrics (names as docs/design.md, Interfaces: crossfeed_puller_<what>_<unit>)."""

from prometheus_client import Counter, Gauge, Histogram

from crossfeed import buckets

LABELS = ("feed", "topic", "partition")

RECORDS = Counter(
    "crossfeed_puller_records_total",
    "Source records copied (into the target topics, or the changes topic of an ordered feed)",
    LABELS,
)
BYTES = Counter("crossfeed_puller_bytes_total", "Key+value bytes of source records copied", LABELS)
LAG_RECORDS = Gauge(
    "crossfeed_puller_lag_records",
    "Source records not yet copied (high watermark - position)",
    LABELS,
)
LAG_SECONDS = Gauge(
    "crossfeed_puller_lag_seconds",
    "Age of the newest copied record while the partition has a backlog, else 0",
    LABELS,
)
DLQ = Counter(
    "crossfeed_puller_dlq_records_total", "Records sent to _crossfeed.dlq by the puller", LABELS
)
LOOP_DROPPED = Counter(
    "crossfeed_puller_loop_dropped_records_total",
    "Records not copied because the target cluster is already in their hop list",
    LABELS,
)
RESOLVED_TS = Gauge(
    "crossfeed_puller_resolved_timestamp_seconds", "resolved_ts of the source partition", LABELS
)
TRANSACTIONS = Counter(
    "crossfeed_puller_transactions_total", "Transactions committed on the target", ("feed",)
)
TRANSACTION_COMMIT_SECONDS = Histogram(
    "crossfeed_puller_transaction_commit_seconds",
    "Time commit_transaction took on the target (copies, offset syncs and marks of one task)",
    ("feed",),
    buckets=buckets.COMMIT,
)
TASKS = Gauge("crossfeed_puller_tasks", "Tasks (staging partitions) this instance owns", ("feed",))
FEED_ERROR = Gauge(
    "crossfeed_puller_feed_error", "1 while the feed is in the error state", ("feed",)
)
OFFSET_SYNCS = Counter(
    "crossfeed_puller_offset_syncs_total",
    "OffsetSync records written to _crossfeed.offset-syncs (mirror feeds)",
    ("feed",),
)
CHECKPOINT_TS = Gauge(
    "crossfeed_puller_checkpoint_timestamp_seconds",
    "Mirror feeds: everything of the source partition up to this time is in the target",
    LABELS,
)
FAILED_TRANSACTIONS = Counter(
    "crossfeed_puller_failed_transactions_total",
    "Transactions that failed (the task restarts from its marks on the target)",
    ("feed",),
)
GAP_RECORDS = Counter(
    "crossfeed_puller_gap_records_total",
    "Source offsets deleted at the source before they were copied (retention, DeleteRecords):"
    " records that will never reach the target",
    LABELS,
)
WAITING_GAPS = Gauge(
    "crossfeed_puller_gap_waiting_partitions",
    "Source partitions not copied until their gap is acknowledged (gap.policy=stop)",
    ("feed",),
)
UNACKNOWLEDGED_GAPS = Gauge(
    "crossfeed_puller_gaps_unacknowledged",
    "Gaps this instance reports and nobody acknowledged yet (crossfeed changefeed ack-gap); "
    "a restarted puller or a new task owner reports them again from the marks",
    ("feed",),
)
