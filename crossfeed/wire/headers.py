"""Header names of the wire contract (docs/design.md, Wire contract). Values are UTF-8 bytes."""

from typing import Final

PREFIX: Final = "crossfeed-"

ORIGIN_CLUSTER: Final = "crossfeed-origin-cluster"
"""cluster.id of the cluster the record was first produced to (set once, first hop)."""
ORIGIN_TOPIC: Final = "crossfeed-origin-topic"
"""Topic the record was first produced to (set once, first hop)."""
HOPS: Final = "crossfeed-hops"
"""Comma-separated cluster.ids the record has been in, oldest first (appended each hop)."""
SRC: Final = "crossfeed-src"
"""``<cluster.id>/<topic>/<partition>/<offset>`` of the copy the puller read."""
COMMIT_TS: Final = "crossfeed-commit-ts"
"""Commit timestamp in microseconds, decimal; set by the producer, kept on every hop."""
TXN: Final = "crossfeed-txn"
"""``<txn id>/<seq>/<count>``, seq from 1 to count; set by the producer for ordered feeds."""
TIMESTAMP: Final = "crossfeed-timestamp"
"""Ordered feeds, in ``.sorted`` only: the change's record timestamp (ms, decimal), which
Spark's Kafka writer cannot set; sinks give it back to the target record."""
SCHEMA: Final = "crossfeed-schema"
"""Ordered feeds with Debezium input, in ``.changes`` and ``.sorted``: the id of the value's
Connect schema, kept in ``_crossfeed.<feed>.schemas`` (the value holds the payload only);
sinks give the target the whole value back, never this header."""
TYPE: Final = "crossfeed-type"
"""Absent for data; ``resolved`` for watermarks; ``begin``/``commit`` in ``sorted``."""

RESOLVED_FROM: Final = "crossfeed-resolved-from"
"""On a puller's resolved mark of an ordered feed: ``watermarks`` when the partition's
resolved_ts follows the change producer's watermarks (a new task owner keeps doing so)."""

TYPE_RESOLVED: Final = "resolved"
RESOLVED_FROM_WATERMARKS: Final = "watermarks"
TYPE_BEGIN: Final = "begin"
TYPE_COMMIT: Final = "commit"

MARK_HEADER: Final = (TYPE, TYPE_RESOLVED.encode())
"""The header that makes a record a resolved mark (as a (name, value) pair)."""


def is_crossfeed_header(name: str) -> bool:
    """True for headers crossfeed owns; consumers listing user headers skip these."""
    return name.startswith(PREFIX)
