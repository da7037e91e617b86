"""The feed's expected source partitions, kept fresh from the source cluster's metadata.

A thread lists the source's topics every ``sorter.partitions_refresh_s`` and sets the
:class:`~crossfeed.services.sorter.report.PartitionsSource` the job and the worker read.
When the source does not answer, the last known set stays (it is persisted with the driver
state, so a lost source cluster does not lose it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.services.sorter.report import PartitionsSource

log = logging.getLogger(__name__)


class PartitionsRefresher:
    """Sets ``partitions`` from the source's metadata until ``stop``; ``known`` counts the
    partitions of the last persisted set (said when the source does not answer)."""

    def __init__(
        self,
        feed: FeedSpec,
        source_conf: dict[str, Any],
        partitions: PartitionsSource,
        refresh_s: float,
        known: Callable[[], int],
    ) -> None:
        self.feed = feed
        self.source_conf = source_conf
        self.partitions = partitions
        self.refresh_s = refresh_s
        self.known = known

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="partitions", daemon=True)
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        admin = clients.admin(self.source_conf, logger=clients.QUIET)
        warned = False
        while not stop.is_set():
            try:
                meta = admin.list_topics(timeout=10)
                selected = self.feed.read_topics(meta.topics)
                broken = [n for n in selected if meta.topics[n].error is not None]
                if broken:  # a partial listing must not make partitions look removed
                    raise RuntimeError(f"topics {broken} could not be described")
                keys = frozenset(
                    f"{name}/{p}" for name in selected for p in meta.topics[name].partitions
                )
                self.partitions.set(keys)
                if warned:
                    log.info("source %s answers again (%d partitions)", self.feed.source, len(keys))
                warned = False
            except Exception as err:  # the source is down: keep the persisted set
                if not warned:
                    log.warning(
                        "cannot list the source %s's partitions (%s); using the last known "
                        "set (%d partitions)",
                        self.feed.source,
                        err,
                        self.known(),
                    )
                warned = True
            stop.wait(self.refresh_s)
