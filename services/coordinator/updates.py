"""What ``PUT /v1/changefeeds/{name}`` may change in a feed that exists (no I/O).

A feed's position lives in its tasks' partitions of ``_crossfeed.<feed>.changes`` on its
target, keyed by source partition, and its consumer groups are translated from the
source to that target. So the source, the target, the mode and the number of tasks
(``staging.partitions``) are fixed once it exists: changing any of them would start a
different feed under the same name, with positions that mean something else. ``start``
only matters when the feed first runs, so changing it would do nothing and is refused
too rather than ignored. The topic selection, the rename format and the other options
may change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crossfeed.core.secrets import mask_text
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.lifecycle import LifecycleError

FIXED: dict[str, Callable[[FeedSpec], Any]] = {
    "source": lambda s: s.source,
    "sink-uri": lambda s: s.sink_uri,
    "mode": lambda s: s.mode,
    "start": lambda s: s.start,
    "staging.partitions": lambda s: s.config.staging_partitions,
    "input": lambda s: s.config.input,
}


def unmasked(current: FeedSpec, new: FeedSpec) -> FeedSpec:
    """``new`` with the stored sink URI where it gives the URI as GET shows it (password
    masked): an update made from a GET's answer keeps the real password."""
    if new.sink_uri != current.sink_uri and new.sink_uri == mask_text(current.sink_uri):
        return new.model_copy(update={"sink_uri": current.sink_uri})
    return new


def check_update(current: FeedSpec, new: FeedSpec) -> bool:
    """True if ``new`` differs from ``current``; refuses a change of a fixed field."""
    for field, value in FIXED.items():
        before, after = value(current), value(new)
        if before != after:
            raise LifecycleError(
                409,
                f"changefeed {current.name!r}: {field} cannot change once the feed exists "
                f"({mask_text(repr(before))} -> {mask_text(repr(after))}); create a feed "
                f"under another name instead (or remove {current.name!r} first, which "
                "forgets its position)",
                "immutable_field",
            )
    return bool(current.model_dump() != new.model_dump())
