"""What a task's transaction ends with: one ResolvedMark per source partition (its
next_offset and resolved_ts, the positions a next owner resumes from) and, for a mirror
feed, the OffsetSync ranges of its copies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crossfeed.core.gaps import carry
from crossfeed.core.partitions import TopicPartition
from crossfeed.services.puller import ordered
from crossfeed.services.puller.copies import CopyProblem
from crossfeed.services.puller.task_state import FeedContext, PartitionState
from crossfeed.wire import headers, records

MARK_HEADERS = [headers.MARK_HEADER]
Record = tuple[bytes, bytes | None, list[Any] | None]  # value, key, headers


def resolved_mark(
    ctx: FeedContext,
    state: PartitionState,
    next_offset: int,
    *,
    caught_up: bool,
    now_us: int,
    known_until_us: int | None,
) -> tuple[int, Record]:
    """The partition's resolved_ts as of this transaction, and its mark."""
    tp = state.tp
    lateness_us = ctx.feed.config.lateness_ms * 1000
    if ctx.ordered:
        resolved = ordered.next_resolved(
            previous=state.resolved_ts_us,
            watermarked=state.watermarked,
            watermark_us=state.watermark_us,
            newest_commit_ts_us=state.last_ts_us,
            caught_up=caught_up,
            now_us=now_us,
            lateness_us=lateness_us,
            known_until_us=known_until_us,
        )
        mark_headers = ordered.ordered_mark_headers(resolved, state.watermarked)
    else:
        resolved = max(
            (now_us if caught_up else state.last_ts_us) - lateness_us,
            state.resolved_ts_us,  # resolved_ts never goes backwards
            0,
        )
        mark_headers = MARK_HEADERS
    if state.gaps:
        mark_headers = [*mark_headers, (headers.GAPS, carry(list(state.gaps)).encode())]
    mark = records.resolved_mark(
        source_cluster=ctx.source_cluster_id,
        topic=tp.topic,
        partition=tp.partition,
        resolved_ts_us=resolved,
        next_offset=next_offset,
    )
    return resolved, (mark, state.key, mark_headers)


def offset_syncs(
    ctx: FeedContext, partitions: dict[TopicPartition, PartitionState]
) -> Iterator[Record | CopyProblem]:
    """A mirror transaction's OffsetSyncs, from the delivery reports of its copies; a
    CopyProblem where those do not tell the target offsets (the transaction fails)."""
    for tp, state in partitions.items():
        route = state.route
        if route is None or not route.blocks:
            continue
        runs = route.runs()
        if isinstance(runs, CopyProblem):
            yield runs
            return
        for run in runs:
            value = records.offset_sync(
                feed=ctx.name,
                source_cluster=ctx.source_cluster_id,
                topic=tp.topic,
                partition=tp.partition,
                target_topic=route.target_topic,
                target_partition=route.partition,
                source_start=run.source_start,
                source_end=run.source_end,
                target_start=run.target_start,
            )
            yield value, records.offset_sync_key(ctx.name, tp.topic, tp.partition), None
