"""The sink's metrics (names as docs/design.md, Interfaces: crossfeed_sink_<what>_<unit>)."""

from prometheus_client import Counter, Gauge

LABELS = ("feed", "topic", "partition")  # the source topic-partition

RECORDS = Counter("crossfeed_sink_records_total", "Records written to the target", LABELS)
BYTES = Counter("crossfeed_sink_bytes_total", "Key+value bytes written to the target", LABELS)
LAG_SECONDS = Gauge(
    "crossfeed_sink_lag_seconds",
    "Source timestamp to target commit of the newest record written (end-to-end lag)",
    LABELS,
)
CHECKPOINT_TS = Gauge(
    "crossfeed_sink_checkpoint_ts_seconds",
    "checkpoint_ts: everything of the source partition up to it is in the target",
    LABELS,
)
DLQ = Counter(
    "crossfeed_sink_dlq_records_total", "Records sent to _crossfeed.dlq by the sink", LABELS
)
OFFSET_SYNCS = Counter("crossfeed_sink_offset_syncs_total", "OffsetSync ranges written", ("feed",))
TRANSACTIONS = Counter(
    "crossfeed_sink_transactions_total", "Transactions committed on the target", ("feed",)
)
ABORTS = Counter(
    "crossfeed_sink_transaction_aborts_total", "Transactions aborted and retried", ("feed",)
)
