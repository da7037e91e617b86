"""A sorted record the sink cannot apply, to ``_crossfeed.dlq`` with the context headers
and the reason; or the feed stops (FeedStopped) with ``errors.tolerance=none``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from crossfeed.dlq import DeadLetter, FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.services.sink.schemas import SchemasUnreadable, UnknownSchema
from crossfeed.wire import topics

log = logging.getLogger(__name__)


def send(
    feed: FeedSpec,
    msg: Any,
    why: tuple[str, str],
    producer: Any,
    cluster: str,
    whole_value: Callable[[Any, list[Any] | None], bytes | None],
) -> None:
    """``msg`` (a sorted record) to the DLQ; ``why``: its error class and reason;
    ``whole_value``: the value as the source had it (a Debezium payload with its schema)."""
    error_class, reason = why
    letter = DeadLetter(
        feed=feed.name,
        cluster_id=cluster,
        topic=msg.topic(),
        partition=msg.partition(),
        offset=msg.offset(),
        stage="sink",
        error_class=error_class,
        error_message=reason,
    )
    if feed.config.errors_tolerance == "none":
        raise FeedStopped(letter)
    log.warning("dead letter: %s", letter.describe())
    try:
        value = whole_value(msg, msg.headers())  # the value as the source had it
    except (UnknownSchema, SchemasUnreadable):
        value = msg.value()  # the payload alone, its header naming the schema
    clients.produce_waiting(
        producer,
        topics.DLQ,
        value=value,
        key=msg.key(),
        headers=letter.headers(msg.headers() or []),
    )
