"""What failover and failback share: finding the feed, grouping the translations."""

from __future__ import annotations

import itertools
from typing import Any

from fastapi import HTTPException

from crossfeed.config import ConfigError
from crossfeed.feeds import FeedSpec, parse_feed
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.services.coordinator.failover.models import GroupOut, PartitionOut
from crossfeed.services.coordinator.lifecycle import LifecycleError
from crossfeed.translation.kafka_io import Unreachable
from crossfeed.translation.translator import PartitionTranslation

STAGING_SCAN_LIMIT = 100_000


def resolve_feed(
    hooks: FailoverHooks, name: str, spec: dict[str, Any] | None, *, ordered: bool = False
) -> tuple[FeedSpec, bool]:
    """(the feed, whether the coordinator runs it): a stored feed wins over a given spec.
    ``ordered``: an ordered feed is taken too (failover: ordered.py)."""
    stored = hooks.find_feed(name)
    if stored is not None:
        return stored, True
    if spec is None:
        raise LifecycleError(
            404,
            f"no changefeed named {name!r} on this coordinator; for a feed run from a feed "
            "file, pass it with --feed-file",
            "feed_not_found",
        )
    try:
        given = parse_feed(spec, "feed_spec")
    except ConfigError as err:
        raise HTTPException(400, str(err)) from None
    if given.name != name:
        message = f"feed_spec names feed {given.name!r}, not {name!r}"
        raise LifecycleError(400, message, "name_mismatch")
    if ordered and given.mode == "ordered":
        return given, False
    if given.mode != "mirror" or given.sink.scheme != "kafka":
        raise HTTPException(
            400, f"feed {name!r} is not a mirror feed into Kafka: it has no consumer groups to move"
        )
    return given, False


def grouped(
    feed: str, results: list[PartitionTranslation], source_reachable: bool
) -> list[GroupOut]:
    """Translations as one entry per group."""
    out = []
    for group, rows in itertools.groupby(sorted(results, key=lambda r: r.group), lambda r: r.group):
        out.append(
            GroupOut(
                feed=feed,
                group=group,
                source_reachable=source_reachable,
                translated=True,
                active_members=None,
                partitions=[PartitionOut.of(r, feed) for r in rows],
            )
        )
    return out


def unreachable(what: str, err: Unreachable | Exception) -> HTTPException:
    return HTTPException(503, f"{what}: {err}")
