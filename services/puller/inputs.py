"""What a feed reads, chosen once per feed (input_for): its source topics themselves, or
a Debezium capture, put in transaction order by its reader first (debezium_reader.py).
What differs between the two lives here, not in branches across the puller."""

from __future__ import annotations

from typing import Any, Protocol

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.services.puller.debezium_reader import DebeziumReader
from crossfeed.wire import topics


class Input(Protocol):
    def schemas_topic(self) -> str | None:
        """Where the feed's record schemas are written along its records, if anywhere."""
        ...

    def prepare(self) -> None:
        """Before the first task starts."""
        ...

    def task_started(self, feed: FeedSpec, source_cluster_id: str) -> None: ...

    def tasks_left(self, count: int) -> None:
        """A task was dropped: ``count`` still run here."""
        ...

    def status(self) -> dict[str, Any] | None: ...


class TopicsInput:
    """The source topics are read as they are: nothing runs beside the tasks."""

    def schemas_topic(self) -> str | None:
        return None

    def prepare(self) -> None:
        pass

    def task_started(self, feed: FeedSpec, source_cluster_id: str) -> None:
        pass

    def tasks_left(self, count: int) -> None:
        pass

    def status(self) -> dict[str, Any] | None:
        return None


class DebeziumInput:
    """A Debezium capture: its reader writes the changes in transaction order to
    ``debezium_ordered``, which the feed's one task copies; the reader runs where that
    task runs."""

    def __init__(self, feed: FeedSpec, source_conf: dict[str, Any]) -> None:
        self.feed = feed
        self.source_conf = source_conf
        self.reader: DebeziumReader | None = None

    def schemas_topic(self) -> str | None:
        return topics.schemas(self.feed.name)

    def prepare(self) -> None:
        # The task reads it from the start.
        kafka_topics.ensure_internal(
            clients.admin(self.source_conf), topics.debezium_ordered(self.feed.name)
        )

    def task_started(self, feed: FeedSpec, source_cluster_id: str) -> None:
        if self.reader is None:  # the feed as it is now: it may have been updated
            self.reader = DebeziumReader(feed, self.source_conf, source_cluster_id)
            self.reader.start()

    def tasks_left(self, count: int) -> None:
        if self.reader is not None and not count:
            self.reader.stop()  # the new owner of the task runs it now
            self.reader = None

    def status(self) -> dict[str, Any] | None:
        return self.reader.status() if self.reader is not None else None


def input_for(feed: FeedSpec, source_conf: dict[str, Any]) -> TopicsInput | DebeziumInput:
    return DebeziumInput(feed, source_conf) if feed.input == "debezium" else TopicsInput()
