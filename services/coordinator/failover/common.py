"""What failover and failback share: finding the feed, the staging backlog, grouping."""

from __future__ import annotations

import itertools
from typing import Any

from fastapi import HTTPException

from crossfeed.config import ConfigError, Settings
from crossfeed.feeds import FeedSpec, parse_feed
from crossfeed.translation import kafka_io
from crossfeed.translation.kafka_io import Unreachable, shared_admin
from crossfeed.translation.reader import RangeReader
from crossfeed.translation.scan import Kind, Seen
from crossfeed.translation.translator import PartitionTranslation
from crossfeed.wire import copied, ids, topics
from crossfeed.wire.codec import CodecError
from services.coordinator.failover.hooks import FailoverHooks
from services.coordinator.failover.models import GroupOut, PartitionOut

STAGING_SCAN_LIMIT = 100_000


def resolve_feed(
    hooks: FailoverHooks, name: str, spec: dict[str, Any] | None
) -> tuple[FeedSpec, bool]:
    """(the feed, whether the coordinator runs it): a stored feed wins over a given spec."""
    stored = hooks.find_feed(name)
    if stored is not None:
        return stored, True
    if spec is None:
        raise HTTPException(
            404,
            f"no changefeed named {name!r} on this coordinator; for a feed run from a feed "
            "file, pass it with --feed-file",
        )
    try:
        given = parse_feed(spec, "feed_spec")
    except ConfigError as err:
        raise HTTPException(400, str(err)) from None
    if given.name != name:
        raise HTTPException(400, f"feed_spec names feed {given.name!r}, not {name!r}")
    if given.mode != "mirror" or given.sink.scheme != "kafka":
        raise HTTPException(
            400, f"feed {name!r} is not a mirror feed into Kafka: it has no consumer groups to move"
        )
    return given, False


def sink_group(feed: str) -> str:
    return ids.sink_group(feed)


def staged_backlog(settings: Settings, feed: FeedSpec) -> tuple[int, int]:
    """(copies staged in ``_crossfeed.<feed>.changes`` that its sinks have not applied,
    live sink instances): the records of the unapplied packs (resolved marks are not
    counted); past the scan limit, every unread staging record counts as one copy."""
    conf = settings.cluster(str(feed.sink.cluster)).client_config()
    admin = shared_admin(conf)
    staging = topics.changes(feed.name)
    info = admin.client().list_topics(staging, timeout=10).topics.get(staging)
    if info is None or info.error is not None:
        return 0, 0
    tps = [(staging, p) for p in sorted(info.partitions)]
    group = sink_group(feed.name)
    committed = kafka_io.group_offsets(admin, [group]).get(group, {})
    ends = kafka_io.end_offsets(admin, tps)
    starts = kafka_io.start_offsets(admin, tps)
    members = kafka_io.active_members(admin, [group]).get(group, 0)
    reader = RangeReader(conf, f"staging-{feed.name}")
    copies = [0]

    def staged(msg: Any) -> Seen:
        # Packs carry no headers (marks do); a pack counts as the records it holds.
        if msg.headers() or not msg.value():
            return Seen(msg.offset(), Kind.OTHER)
        try:
            copies[0] += copied.count(msg.value())
        except CodecError:
            return Seen(msg.offset(), Kind.OTHER)
        return Seen(msg.offset(), Kind.COPYABLE)

    total = 0
    try:
        for tp in tps:
            start = max(committed.get(tp, starts.get(tp, 0)), starts.get(tp, 0))
            end = ends.get(tp, 0)
            if end <= start:
                continue
            scan, _ = reader.scan(tp[0], tp[1], start, end, STAGING_SCAN_LIMIT, staged)
            total += scan.copyable_bound - scan.copyable  # unread staging records, one each
    finally:
        reader.close()
    return total + copies[0], members


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
                partitions=[PartitionOut.of(r) for r in rows],
            )
        )
    return out


def unreachable(what: str, err: Unreachable | Exception) -> HTTPException:
    return HTTPException(503, f"{what}: {err}")
