"""Reading feeds from ``_crossfeed.state`` (the coordinator's store) without a coordinator."""

from __future__ import annotations

from typing import Any

from crossfeed.feeds import FeedSpec, parse_feed
from crossfeed.membership import TopicTail
from crossfeed.wire import codec, topics


def feed_from_record(record: dict[str, Any]) -> FeedSpec:
    """A FeedSpec model from its Avro record (``feed/<name>`` in ``_crossfeed.state``)."""
    data = {
        "name": record["name"],
        "source": record["source"],
        "sink-uri": record["sink_uri"],
        "mode": record["mode"],
        "topics": list(record["topics"]),
        "exclude": list(record["exclude"]),
        "rename-format": record["rename_format"],
        "start": record["start"],
        "config": dict(record["config"]),
    }
    return parse_feed(data, f"_crossfeed.state record feed/{record['name']}")


def read_feed(control_conf: dict[str, Any], name: str, timeout_s: float = 30.0) -> FeedSpec | None:
    """The feed's spec as the coordinator stored it, or None if there is no such feed."""
    found: dict[str, bytes | None] = {}

    def on_record(key: str, value: bytes | None) -> None:
        if key == f"feed/{name}":
            found["spec"] = value

    tail = TopicTail(control_conf, topics.STATE, on_record, name="feed-reader").start()
    try:
        if not tail.caught_up.wait(timeout_s):
            raise TimeoutError(f"could not read {topics.STATE} within {timeout_s:.0f}s")
    finally:
        tail.stop()
    value = found.get("spec")
    return feed_from_record(codec.decode("FeedSpec", value)) if value else None
