"""What an ordered sink (base.py) tells about itself: its metrics after a commit, its
heartbeats' content and its status."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from crossfeed.membership import HeartbeatContent
from crossfeed.services.sink import metrics

if TYPE_CHECKING:
    from crossfeed.services.sink.base import OrderedSink

SORTED_PARTITION = 0


def count_commit(sink: OrderedSink) -> None:
    """The metrics of the target transaction ``sink`` just committed."""
    labels = sink.labels
    metrics.TRANSACTIONS.labels(*labels).inc()
    metrics.SOURCE_TRANSACTIONS.labels(*labels).inc(sink.txn_sources)
    metrics.EVENTS.labels(*labels).inc(sink.txn_events)
    metrics.BYTES.labels(*labels).inc(sink.txn_bytes)
    for table, count in sink.skipped.items():
        metrics.LWW_SKIPPED.labels(sink.feed.name, table).inc(count)
    if sink.txn_dead:
        metrics.DLQ.labels(sink.feed.name, sink.sorted_topic, "0").inc(sink.txn_dead)
    if sink.committed.checkpoint_ts:
        metrics.CHECKPOINT_TS.labels(*labels).set(sink.committed.checkpoint_ts / 1e6)
    if sink.newest_ts_ms >= 0:
        lag = max(0.0, time.time() - sink.newest_ts_ms / 1000)
        metrics.LAG_SECONDS.labels(*labels).set(lag)


def heartbeat_content(sink: OrderedSink, applying: bool, **extra: Any) -> HeartbeatContent:
    return HeartbeatContent(
        tasks=[f"{sink.feed.name}/sink/{SORTED_PARTITION}"] if applying else [],
        feeds=[sink.feed.name],
        address=sink.address,
        last_error=sink.last_error or "",
        checkpoint_ts_us=sink.committed.checkpoint_ts if applying else 0,
        **extra,
    )


def status(sink: OrderedSink, applying: bool, target: str, **extra: Any) -> dict[str, Any]:
    return {
        "role": "sink",
        "mode": "ordered",
        "target": target,
        "instance": sink.instance_id,
        "feed": sink.feed.name,
        "state": sink.state,
        "last_error": sink.last_error,
        "tasks": [SORTED_PARTITION] if applying else [],
        "applied": sink.committed.position.describe(),
        "applied_commit_ts_us": sink.committed.position.commit_ts,
        "checkpoint_ts_us": sink.committed.checkpoint_ts,
        "committed_offset": sink.committed_offset,
        **extra,
    }
