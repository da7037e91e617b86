"""``crossfeed puller run``: one puller instance for one feed."""

from __future__ import annotations

from crossfeed import service
from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from services.puller.worker import PullerWorker


def run(
    settings: Settings, feed: FeedSpec, instance: str | None = None, metrics_port: int | None = None
) -> int:
    instance_id = service.instance_id("puller", instance)
    return service.run(settings, lambda: PullerWorker(settings, feed, instance_id), metrics_port)
