"""Dead letters: a source record that is not copied, or a gap of records deleted before
they were, kept in ``_crossfeed.dlq`` with why. They wait in their partition's state and
are sent with its records (shipping.py): a commit may be under way."""

from __future__ import annotations

import logging
from typing import Any

from crossfeed.core.gaps import Gap
from crossfeed.dlq import GAP_END, DeadLetter, FeedStopped
from crossfeed.services.puller.task_state import FeedContext, PartitionState

log = logging.getLogger(__name__)

GAP_ERROR_CLASS = "SourceRecordsDeleted"  # a gap's dead letter (core/gaps.py)


def letter(
    ctx: FeedContext,
    state: PartitionState,
    record: tuple[bytes | None, bytes | None, list[Any]],
    offset: int,
    error_class: str,
    reason: str,
) -> None:
    """``record`` (key, value, headers) at ``offset`` is not copied: its dead letter, or
    the feed stops (errors.tolerance=none)."""
    key, value, hdrs = record
    dead = DeadLetter(
        feed=ctx.name,
        cluster_id=ctx.source_cluster_id,
        topic=state.tp.topic,
        partition=state.tp.partition,
        offset=offset,
        stage="puller",
        error_class=error_class,
        error_message=reason,
    )
    if ctx.feed.config.errors_tolerance == "none":
        raise FeedStopped(dead)
    log.warning("dead letter: %s", dead.describe())
    state.letters.append((key, value, dead.headers(hdrs)))


def gap_letter(ctx: FeedContext, state: PartitionState, gap: Gap) -> None:
    """The records of ``gap`` will never be copied (deleted at the source): a dead letter
    without key or value says so in the target."""
    dead = DeadLetter(
        feed=ctx.name,
        cluster_id=ctx.source_cluster_id,
        topic=state.tp.topic,
        partition=state.tp.partition,
        offset=gap.first,
        stage="puller",
        error_class=GAP_ERROR_CLASS,
        error_message=f"offsets {gap.first}-{gap.last} ({gap.count} records) were deleted "
        "at the source before they were copied",
    )
    state.letters.append((None, None, dead.headers([(GAP_END, str(gap.end).encode())])))
