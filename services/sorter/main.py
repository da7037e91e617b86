"""``crossfeed sorter run``: the sorter of one ordered feed (a Spark Structured Streaming job).

One sorter runs per feed (its checkpoint directory is locked); it scales with Spark
executors (``sorter.spark_master``, ``sorter.spark_conf`` or spark-submit), not with
instances. See services/sorter/README.md.
"""

from __future__ import annotations

import logging
import sys

from crossfeed import service
from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.services.sorter.segments import FeedLocked
from crossfeed.services.sorter.sparkconf import SetupError
from crossfeed.services.sorter.worker import SorterFailed, SorterWorker

log = logging.getLogger(__name__)


def run(
    settings: Settings,
    feed: FeedSpec,
    instance: str | None = None,
    metrics_port: int | None = None,
    *,
    coordinated: bool = False,  # one sorter per feed either way (its checkpoint is locked)
) -> int:
    instance_id = service.instance_id("sorter", instance)
    alias = settings.staging_alias(feed.sink.cluster)
    settings.cluster(feed.source)
    if feed.mode != "ordered":
        print(
            f"error: feed {feed.name!r} is a {feed.mode} feed; the sorter runs ordered feeds "
            "(--mode ordered)",
            file=sys.stderr,
        )
        return 1
    control_conf = settings.cluster(settings.control_alias()).client_config()
    try:
        return service.run(
            settings,
            lambda: SorterWorker(settings, feed, instance_id, alias, control_conf),
            metrics_port,
            service.Who("sorter", instance_id, feed.name),
        )
    except (SetupError, FeedLocked, SorterFailed) as err:
        log.error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        return 1
