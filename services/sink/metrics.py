"""The sink's metrics (names as docs/design.md, Interfaces: crossfeed_sink_<what>_<unit>).

A feed has one sorted stream, so all but the dead-letter counter are labelled by feed."""

from prometheus_client import Counter, Gauge, Histogram

from crossfeed import buckets

FEED = ("feed",)

DLQ = Counter(
    "crossfeed_sink_dlq_records_total",
    "Records sent to _crossfeed.dlq by the sink",
    ("feed", "topic", "partition"),
)
TRANSACTIONS = Counter(
    "crossfeed_sink_transactions_total", "Transactions committed on the target", FEED
)
TRANSACTION_COMMIT_SECONDS = Histogram(
    "crossfeed_sink_transaction_commit_seconds",
    "Time the target took to commit a transaction (Kafka commit_transaction, PostgreSQL COMMIT)",
    FEED,
    buckets=buckets.COMMIT,
)
ABORTS = Counter(
    "crossfeed_sink_transaction_aborts_total", "Transactions aborted and retried", FEED
)
SOURCE_TRANSACTIONS = Counter(
    "crossfeed_sink_source_transactions_total",
    "Source transactions applied whole to the target (ordered feeds)",
    FEED,
)
EVENTS = Counter(
    "crossfeed_sink_events_total", "Change events written to the target (ordered feeds)", FEED
)
BYTES = Counter(
    "crossfeed_sink_event_bytes_total",
    "Key+value bytes of the change events written (ordered feeds)",
    FEED,
)
REPLAYED = Counter(
    "crossfeed_sink_replayed_transactions_total",
    "Source transactions at or below the applied position, dropped (sorter replays)",
    FEED,
)
CUT_SHORT = Counter(
    "crossfeed_sink_cut_short_transactions_total",
    "Source transactions cut short in the sorted stream, thrown away",
    FEED,
)
LWW_SKIPPED = Counter(
    "crossfeed_sink_rows_skipped_lww_total",
    "Row changes skipped because the row holds a newer commit_ts (last writer wins)",
    ("feed", "table"),
)
CONFLICTS = Counter(
    "crossfeed_sink_conflicts_total",
    "Active-active: replicated changes that met a newer write (outcome lost: skipped and "
    "recorded in crossfeed_conflicts) or overwrote an older write made on the target side "
    "(outcome won)",
    ("feed", "outcome"),
)
CHECKPOINT_TS = Gauge(
    "crossfeed_sink_feed_checkpoint_timestamp_seconds",
    "Ordered feeds: checkpoint_ts, everything with commit_ts up to it is in the target",
    FEED,
)
LAG_SECONDS = Gauge(
    "crossfeed_sink_apply_lag_seconds",
    "Ordered feeds: now minus the source timestamp of the newest change committed",
    FEED,
)
SYNCPOINT_TS = Gauge(
    "crossfeed_sink_syncpoint_timestamp_seconds",
    "Database sinks: consistency_ts of the newest syncpoint row written",
    FEED,
)
RETRIES = Counter(
    "crossfeed_sink_database_retries_total",
    "Database sinks: connections lost or refused, retried with backoff",
    FEED,
)
