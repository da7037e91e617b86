"""``crossfeed sink run``: one sink instance for one ordered feed, into the target its
sink URI names (a Kafka topic: kafka/sink.py; PostgreSQL: postgres/sink.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from crossfeed import service
from crossfeed.config import ConfigError, Settings
from crossfeed.extras import require
from crossfeed.feeds import FeedSpec

if TYPE_CHECKING:
    from crossfeed.services.sink.base import OrderedSink


def run(
    settings: Settings,
    feed: FeedSpec,
    instance: str | None = None,
    metrics_port: int | None = None,
    *,
    coordinated: bool = False,  # one instance applies a feed either way (base.py)
) -> int:
    if feed.mode == "mirror":
        raise MirrorFeedHasNoSink(
            f"feed {feed.name!r} is a mirror feed: its pullers write the target topics "
            f"directly, no sink runs for it (run 'crossfeed puller run --feed {feed.name}')"
        )
    instance_id = service.instance_id("sink", instance)
    static = instance is not None
    control_conf = settings.cluster(settings.control_alias()).client_config()
    sink_class: Callable[..., OrderedSink]
    if feed.sink.scheme == "postgresql":
        require("postgres", "the PostgreSQL sink")
        from crossfeed.services.sink.postgres.sink import PostgresSink

        sink_class = PostgresSink
        if feed.config.active_active_side is not None:
            from crossfeed.services.sink.postgres.active_active import ActiveActiveSink

            sink_class = ActiveActiveSink
    else:
        assert feed.sink.cluster is not None
        from crossfeed.services.sink.kafka.sink import KafkaSink

        sink_class = KafkaSink
    return service.run(
        settings,
        lambda: sink_class(settings, feed, instance_id, control_conf, static=static),
        metrics_port,
        service.Who("sink", instance_id, feed.name),
    )


class MirrorFeedHasNoSink(ConfigError):
    """``crossfeed sink run`` for a mirror feed (the CLI prints it, exit code 1)."""
