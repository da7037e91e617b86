"""``crossfeed sink run``: one sink instance for one ordered feed.

Mirror feeds have no sink: their pullers write the target topics directly
(services/puller/task.py).
"""

from __future__ import annotations

from crossfeed import service
from crossfeed.config import ConfigError, Settings
from crossfeed.extras import require
from crossfeed.feeds import FeedSpec


def run(
    settings: Settings,
    feed: FeedSpec,
    instance: str | None = None,
    metrics_port: int | None = None,
    *,
    coordinated: bool = False,  # sinks share staging partitions by consumer group either way
) -> int:
    if feed.mode == "mirror":
        raise MirrorFeedHasNoSink(
            f"feed {feed.name!r} is a mirror feed: its pullers write the target topics "
            f"directly, no sink runs for it (run 'crossfeed puller run --feed {feed.name}')"
        )
    instance_id = service.instance_id("sink", instance)
    static = instance is not None
    who = service.Who("sink", instance_id, feed.name)
    sink = feed.sink
    if sink.scheme == "postgresql":
        require("postgres", "the PostgreSQL sink")
        from crossfeed.services.sink.postgres.sink import PostgresSink

        control_conf = settings.cluster(settings.control_alias()).client_config()
        return service.run(
            settings,
            lambda: PostgresSink(settings, feed, instance_id, control_conf, static=static),
            metrics_port,
            who,
        )
    target_alias = sink.cluster
    assert target_alias is not None
    control_conf = settings.cluster(settings.control_alias()).client_config()
    from crossfeed.services.sink.ordered_kafka import OrderedKafkaSink

    return service.run(
        settings,
        lambda: OrderedKafkaSink(settings, feed, instance_id, control_conf, static=static),
        metrics_port,
        who,
    )


class MirrorFeedHasNoSink(ConfigError):
    """``crossfeed sink run`` for a mirror feed (the CLI prints it, exit code 1)."""
