"""Internal topic names of the wire contract (docs/design.md). Fixed; never configurable."""

from typing import Final

OFFSET_SYNCS: Final = "_crossfeed.offset-syncs"
CHECKPOINTS: Final = "_crossfeed.checkpoints"
STATE: Final = "_crossfeed.state"
HEARTBEATS: Final = "_crossfeed.heartbeats"
DLQ: Final = "_crossfeed.dlq"
CONSUMER_TIMESTAMPS: Final = "__consumer_timestamps"
DESTINATION_TIMESTAMPS: Final = "_crossfeed.consumer-timestamps"
"""On a feed's target: the commits a TimestampedConsumer with the opt-in made on the
source, keyed ``<source cluster.id>/<group>/<topic>/<partition>``. Not the source's
``__consumer_timestamps`` name: on the target that topic holds the commits made *there*
(read by the reverse feed's translator), and a replicator may copy the source's into it."""

STAGING_MAX_MESSAGE_BYTES: Final = 64 << 20
"""A source record up to this size fits one staging record of ``.changes``."""
STAGING_HEADROOM_BYTES: Final = 64 << 10
"""Room on top of it for the provenance header and the batch framing."""


DLQ_MAX_MESSAGE_BYTES: Final = 64 << 20
"""A dead letter carries the whole record it could not deliver, up to this size."""


def dlq_config() -> dict[str, str]:
    """Topic configs of ``_crossfeed.dlq`` (whoever creates it first)."""
    return {"cleanup.policy": "delete", "max.message.bytes": str(DLQ_MAX_MESSAGE_BYTES)}


def offset_syncs_config() -> dict[str, str]:
    """Topic configs of ``_crossfeed.offset-syncs``: compacted (the newest sync per source
    partition survives) and deleted after a week (a translator keeps what it read in
    memory and needs the history only since its feed started)."""
    return {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(7 * 86_400_000),
        "segment.ms": str(3_600_000),
    }


def staging_config() -> dict[str, str]:
    """Topic configs of ``_crossfeed.<feed>.changes`` (whoever creates it first)."""
    return {
        "cleanup.policy": "delete",
        "max.message.bytes": str(STAGING_MAX_MESSAGE_BYTES + STAGING_HEADROOM_BYTES),
    }


_COMPACTED: Final = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "min.cleanable.dirty.ratio": "0.1",
}


def sorted_config() -> dict[str, str]:
    """Topic configs of ``_crossfeed.<feed>.sorted``: its records are the staged change
    events (with the sorter's headers), as large as the staging topic allows."""
    return staging_config()


def schemas_config() -> dict[str, str]:
    """Topic configs of ``_crossfeed.<feed>.schemas``: compacted, never deleted (a change
    anywhere in ``.changes`` or ``.sorted`` may refer to any schema), as large as a
    staging record may be."""
    return {
        **_COMPACTED,
        "max.message.bytes": str(STAGING_MAX_MESSAGE_BYTES + STAGING_HEADROOM_BYTES),
    }


def internal_config(topic: str) -> dict[str, str]:
    """The topic configs of one of crossfeed's internal topics: every service that may
    create it first creates it the same way. ValueError for any other topic."""
    if topic == DLQ:
        return dlq_config()
    if topic == OFFSET_SYNCS:
        return offset_syncs_config()
    if topic in (STATE, HEARTBEATS, CHECKPOINTS, DESTINATION_TIMESTAMPS):
        return dict(_COMPACTED)
    if topic.startswith("_crossfeed.") and topic.endswith(".changes"):
        return staging_config()
    if topic.startswith("_crossfeed.") and topic.endswith(".sorted"):
        return sorted_config()
    if topic.startswith("_crossfeed.") and topic.endswith(".debezium"):
        return staging_config()
    if topic.startswith("_crossfeed.") and topic.endswith(".schemas"):
        return schemas_config()
    raise ValueError(f"{topic!r} is not one of crossfeed's internal topics")


def changes(feed: str) -> str:
    """The feed's topic on the target cluster: its puller tasks' positions (ResolvedMarks,
    one partition per task) and, for ordered feeds, the staged changes."""
    return f"_crossfeed.{feed}.changes"


def sorted_(feed: str) -> str:
    """Ordered feeds: the sorter's output topic for ``feed`` (on the target cluster)."""
    return f"_crossfeed.{feed}.sorted"


def debezium_ordered(feed: str) -> str:
    """Ordered feeds with Debezium input: Debezium's events in commit order with crossfeed's
    ordering headers, on the *source* cluster (services/puller/debezium_reader.py); the feed's
    puller reads it as an ordered feed reads a change producer's topic."""
    return f"_crossfeed.{feed}.debezium"


def schemas(feed: str) -> str:
    """Ordered feeds with Debezium input: the Connect schemas of the values in ``.changes``
    and ``.sorted``, keyed by id (crossfeed/wire/debezium.py), on the target cluster."""
    return f"_crossfeed.{feed}.schemas"


def is_internal(topic: str) -> bool:
    """Topics no feed may select: crossfeed's own and Kafka's (``__*``)."""
    return topic.startswith("_crossfeed.") or topic.startswith("__")


def destination_timestamp_key(source_cluster: str, group: str, topic: str, partition: int) -> str:
    """The key of a commit recorded in ``_crossfeed.consumer-timestamps``: the source
    cluster first (cluster ids hold no ``/``), then ``__consumer_timestamps``' key."""
    if not source_cluster or "/" in source_cluster:
        raise ValueError(f"not a cluster id: {source_cluster!r}")
    return f"{source_cluster}/{group}/{topic}/{partition}"


def is_decimal(text: str) -> bool:
    """A non-negative decimal number as keys and headers spell one: ASCII digits only
    ("²" or "٥" are digits to ``str.isdigit()`` but ``int()`` refuses them), at most 19
    of them (a long; ``int()`` refuses a string of more than 4,300 digits)."""
    return len(text) <= 19 and text.isascii() and text.isdigit()


def parse_destination_timestamp_key(key: str) -> tuple[str, str, str, int] | None:
    """(source cluster, group, topic, partition) of such a key; None if it is not one.
    The group is what lies between the first ``/`` and the topic (groups may hold ``/``)."""
    cluster, _, rest = key.partition("/")
    head, _, number = rest.rpartition("/")
    group, _, topic = head.rpartition("/")
    if not cluster or not group or not topic or not is_decimal(number):
        return None
    return cluster, group, topic, int(number)
