"""Metrics every sink shares (names as docs/design.md, Interfaces: crossfeed_sink_<what>_<unit>);
the ordered sinks' own are in ordered_metrics.py. (Mirror feeds have no sink: their pullers
report what they copy, services/puller/metrics.py.)"""

from prometheus_client import Counter, Histogram

from crossfeed import buckets

LABELS = ("feed", "topic", "partition")

DLQ = Counter(
    "crossfeed_sink_dlq_records_total", "Records sent to _crossfeed.dlq by the sink", LABELS
)
TRANSACTIONS = Counter(
    "crossfeed_sink_transactions_total", "Transactions committed on the target", ("feed",)
)
TRANSACTION_COMMIT_SECONDS = Histogram(
    "crossfeed_sink_transaction_commit_seconds",
    "Time the target took to commit a transaction (Kafka commit_transaction, PostgreSQL COMMIT)",
    ("feed",),
    buckets=buckets.COMMIT,
)
ABORTS = Counter(
    "crossfeed_sink_transaction_aborts_total", "Transactions aborted and retried", ("feed",)
)
