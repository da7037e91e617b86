"""Header names of the wire contract (docs/design.md, Wire contract). Values are UTF-8 bytes."""

from typing import Final

PREFIX: Final = "crossfeed-"

PROV: Final = "crossfeed-prov"
"""Provenance, stamped by the puller on every hop:
``<hops>/<topic>/<partition>/<offset>[/<origin topic>]`` — the cluster.ids the record has
been in, comma-separated and oldest first (the first is its origin cluster, the last the
cluster of the copy just read), then that copy's topic, partition and offset, then the
topic it was first produced to where that is another (crossfeed/wire/grammar.py: PROV)."""

# The four headers provenance took before crossfeed-prov: read (a record copied by an
# older puller), never written; a puller that stamps such a record folds them into one
# crossfeed-prov (crossfeed/core/provenance.py).
ORIGIN_CLUSTER: Final = "crossfeed-origin-cluster"
"""Legacy: cluster.id of the cluster the record was first produced to."""
ORIGIN_TOPIC: Final = "crossfeed-origin-topic"
"""Legacy: topic the record was first produced to."""
HOPS: Final = "crossfeed-hops"
"""Legacy: comma-separated cluster.ids the record has been in, oldest first."""
SRC: Final = "crossfeed-src"
"""Legacy: ``<cluster.id>/<topic>/<partition>/<offset>`` of the copy the puller read."""
LEGACY_PROVENANCE: Final = (ORIGIN_CLUSTER, ORIGIN_TOPIC, HOPS, SRC)
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
ORDER: Final = "crossfeed-order"
"""Ordered feeds, on a data record in ``.sorted`` only: ``<seq>/<count>/<commit_ts>/<txn id>``,
the record's place in its transaction, so the transaction needs no ``begin``/``commit``
records around it (crossfeed/wire/grammar.py: ORDER; docs/ordered-feeds.md §3). Sinks
never write it into a target."""

RESOLVED_FROM: Final = "crossfeed-resolved-from"
"""On a puller's resolved mark of an ordered feed: ``watermarks`` when the partition's
resolved_ts follows the change producer's watermarks (a new task owner keeps doing so)."""

GAPS: Final = "crossfeed-gaps"
"""On a puller's resolved mark: the partition's gaps reported and not yet acknowledged,
``first-end`` comma-separated (crossfeed/core/gaps.py), so that a restarted puller or a
new task owner reports them again until they are."""

WATERMARK: Final = "crossfeed-watermark"
"""On a change producer's watermark: ``final`` when the producer closed. The partition has
no producer from then on: the puller follows the clock again (resolved_ts = now −
``lateness.ms`` once caught up, never below the final watermark) until a producer's
watermark leads it again (docs/ordered-feeds.md §1)."""

TYPE_RESOLVED: Final = "resolved"
WATERMARK_FINAL: Final = "final"
RESOLVED_FROM_WATERMARKS: Final = "watermarks"
TYPE_BEGIN: Final = "begin"
TYPE_COMMIT: Final = "commit"

MARK_HEADER: Final = (TYPE, TYPE_RESOLVED.encode())
"""The header that makes a record a resolved mark (as a (name, value) pair)."""


def is_crossfeed_header(name: str) -> bool:
    """True for headers crossfeed owns; consumers listing user headers skip these."""
    return name.startswith(PREFIX)
