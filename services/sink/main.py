"""``crossfeed sink run``: one sink instance for one feed."""

from __future__ import annotations

from crossfeed import service
from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from services.sink.mirror import MirrorSink


def run(
    settings: Settings,
    feed: FeedSpec,
    instance: str | None = None,
    metrics_port: int | None = None,
    *,
    coordinated: bool = False,  # sinks share staging partitions by consumer group either way
) -> int:
    instance_id = service.instance_id("sink", instance)
    static = instance is not None
    sink = feed.sink
    if sink.scheme == "postgresql":
        from services.sink.postgres.sink import PostgresSink

        control_conf = settings.cluster(settings.control_alias()).client_config()
        return service.run(
            settings,
            lambda: PostgresSink(settings, feed, instance_id, control_conf, static=static),
            metrics_port,
        )
    target_alias = sink.cluster
    assert target_alias is not None
    control_conf = settings.cluster(settings.control_alias()).client_config()
    if feed.mode == "ordered":
        from services.sink.ordered_kafka import OrderedKafkaSink

        return service.run(
            settings,
            lambda: OrderedKafkaSink(settings, feed, instance_id, control_conf, static=static),
            metrics_port,
        )
    return service.run(
        settings,
        lambda: MirrorSink(settings, feed, instance_id, control_conf, static=static),
        metrics_port,
    )
