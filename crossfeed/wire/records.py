"""Builders of crossfeed's own records: OffsetSync and ResolvedMark.

Every writer of these records (the puller's tasks, ``failback --replay-extra``, the
change producer's watermarks, the sorter's resolved marks) builds them here, so their
keys, headers and fields are spelled once (schemas/OffsetSync.avsc,
schemas/ResolvedMark.avsc). The puller's marks add one header to these
(services/puller/ordered.py).
"""

from __future__ import annotations

from typing import Any

from crossfeed.wire import codec, headers


def offset_sync_key(feed: str, topic: str, partition: int) -> bytes:
    """The key of a source partition's OffsetSyncs: the compacted topic keeps the newest
    per feed and source partition (the translator reads the whole history as it comes)."""
    return f"{feed}/{topic}/{partition}".encode()


def offset_sync(
    *,
    feed: str,
    source_cluster: str,
    topic: str,
    partition: int,
    target_topic: str,
    target_partition: int,
    source_start: int,
    source_end: int,
    target_start: int,
) -> bytes:
    """Source offsets ``source_start..source_end`` (inclusive) copied to
    ``target_start..`` of the target partition, contiguous on both sides."""
    return codec.encode(
        "OffsetSync",
        {
            "source_cluster": source_cluster,
            "topic": topic,
            "partition": partition,
            "source_start": source_start,
            "source_end": source_end,
            "target_topic": target_topic,
            "target_partition": target_partition,
            "target_start": target_start,
            "feed": feed,
        },
    )


def mark_key(topic: str, partition: int) -> bytes:
    """The key of a source partition's ResolvedMarks in the task's staging partition."""
    return f"{topic}/{partition}".encode()


def resolved_mark(
    *, source_cluster: str, topic: str, partition: int, resolved_ts_us: int, next_offset: int
) -> bytes:
    """A task's position in one source partition, and its resolved_ts."""
    return codec.encode(
        "ResolvedMark",
        {
            "source_cluster": source_cluster,
            "topic": topic,
            "partition": partition,
            "resolved_ts_us": max(resolved_ts_us, 0),
            "next_offset": next_offset,
        },
    )


def resolved_mark_headers(resolved_ts_us: int) -> list[tuple[str, Any]]:
    """The headers of a resolved mark (docs/ordered-feeds.md §1-§3): its type and its
    resolved_ts as ``crossfeed-commit-ts`` (values bytes; Any: the clients' header types
    differ)."""
    return [
        (headers.TYPE, headers.TYPE_RESOLVED.encode()),
        (headers.COMMIT_TS, str(resolved_ts_us).encode()),
    ]
