"""``crossfeed puller run``: one puller instance for one feed."""

from __future__ import annotations

from crossfeed import service
from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.services.puller.membership import CoordinatorMembership, GroupMembership
from crossfeed.services.puller.worker import PullerWorker


def run(
    settings: Settings,
    feed: FeedSpec,
    instance: str | None = None,
    metrics_port: int | None = None,
    *,
    coordinated: bool = False,
) -> int:
    """``coordinated``: tasks come from the coordinator, else from the feed's consumer group."""
    instance_id = service.instance_id("puller", instance)
    target_alias = settings.staging_alias(feed.sink.cluster)  # where it stages
    target_conf = settings.cluster(target_alias).client_config()
    control_conf = settings.cluster(settings.control_alias()).client_config()

    def make() -> PullerWorker:
        membership: GroupMembership | CoordinatorMembership
        if coordinated:
            membership = CoordinatorMembership(control_conf, feed.name, instance_id)
        else:
            membership = GroupMembership(
                target_conf,
                feed.name,
                instance_id,
                settings.coordinator.failover_timeout_s,
                static=instance is not None,
            )
        return PullerWorker(settings, feed, instance_id, membership, control_conf)

    return service.run(settings, make, metrics_port, service.Who("puller", instance_id, feed.name))
