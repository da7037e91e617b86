"""Internal topic names of the wire contract (DESIGN.md §3). Fixed; never configurable."""

from typing import Final

OFFSET_SYNCS: Final = "_crossfeed.offset-syncs"
CHECKPOINTS: Final = "_crossfeed.checkpoints"
STATE: Final = "_crossfeed.state"
HEARTBEATS: Final = "_crossfeed.heartbeats"
DLQ: Final = "_crossfeed.dlq"
CONSUMER_TIMESTAMPS: Final = "__consumer_timestamps"


def changes(feed: str) -> str:
    """Staging topic the puller writes for ``feed`` (on the target cluster)."""
    return f"_crossfeed.{feed}.changes"


def sorted_(feed: str) -> str:
    """Ordered feeds: the sorter's output topic for ``feed`` (on the target cluster)."""
    return f"_crossfeed.{feed}.sorted"


def is_internal(topic: str) -> bool:
    """Topics no feed may select: crossfeed's own and Kafka's (``__*``)."""
    return topic.startswith("_crossfeed.") or topic.startswith("__")
