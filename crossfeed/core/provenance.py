"""Provenance stamping and loop prevention (docs/design.md: guarantee 4, Wire contract).

Headers use confluent-kafka's form: a list of ``(name, value)`` pairs, order preserved,
duplicates allowed, ``value`` bytes or ``None``.

A copy carries its provenance in one header, ``crossfeed-prov``:
``<hops>/<topic>/<partition>/<offset>[/<origin topic>]`` (crossfeed/wire/grammar.py:
PROV). The hop list names the clusters the record has been in, oldest first: its first
entry is the origin cluster, its last the cluster of the copy just read, which topic,
partition and offset locate. The origin topic follows only when it is not that topic (a
record renamed by an earlier hop), so a first-hop copy reads ``A/orders/3/42``.

Invariants of :func:`stamp` (each is a property test):

A. User headers (names not starting with ``crossfeed-``) come out byte-identical and in
   their original relative order, duplicates included.
B. The output holds exactly one ``crossfeed-prov``, appended after all other headers, and
   none of the four legacy provenance headers (``LEGACY_PROVENANCE``).
C. The origin is set once, on the first hop: the origin cluster stays the first hop, and
   the origin topic an earlier stamp recorded is kept.
D. The hop list is the existing one plus the source cluster.id, oldest first; the source
   is not appended when it is already the last entry (a re-stamp is idempotent).
E. Topic, partition and offset always describe the copy just read, in the last hop's
   cluster; any earlier ones are replaced.
F. Every other ``crossfeed-*`` header (``crossfeed-commit-ts``, ``crossfeed-txn``,
   ``crossfeed-type``, unknown future ones) is kept untouched, in place.

Records copied by an older puller carry four headers instead (``crossfeed-origin-cluster``,
``crossfeed-origin-topic``, ``crossfeed-hops``, ``crossfeed-src``); every reader here takes
both forms (:mod:`crossfeed.core.provenance_header`), and :func:`stamp` folds the old ones
into ``crossfeed-prov``, keeping every cluster they name in the hop list.

Loop prevention: a record is copied to a target cluster only if no hop list of either form
(nor a legacy origin cluster) names that cluster (:func:`should_copy`). Because the puller
stamps the *source* cluster.id, a record that went A→B carries hops ``A`` in B, and the
B→A puller refuses it; a record that went A→B→C carries ``A,B`` in C.
"""

from __future__ import annotations

from collections.abc import Sequence

from crossfeed.core.provenance_header import (
    STAMPED,
    Header,
    Provenance,
    SrcRef,
    encode,
    hops,
    is_cluster_id,
    origin_topic,
    parse_prov,
    parse_src,
    prior,
    src_of,
)
from crossfeed.wire.headers import PROV, is_crossfeed_header

# The readers live in provenance_header; callers (puller, sorter, translation, failover)
# import this module alone.
__all__ = [
    "STAMPED",
    "Header",
    "Provenance",
    "SrcRef",
    "Stamper",
    "hops",
    "origin_topic",
    "parse_prov",
    "parse_src",
    "should_copy",
    "src_of",
    "stamp",
    "user_headers",
]


def should_copy(headers: Sequence[Header], target_cluster_id: str) -> bool:
    """False when the record has already been in the target cluster (copying would loop)."""
    return target_cluster_id not in hops(headers)


def user_headers(headers: Sequence[Header]) -> list[Header]:
    """The headers that are not ``crossfeed-*`` ones, in order (what the user wrote)."""
    return [(name, value) for name, value in headers if not is_crossfeed_header(name)]


def stamp(
    headers: Sequence[Header],
    *,
    source_cluster_id: str,
    source_topic: str,
    partition: int,
    offset: int,
) -> list[Header]:
    """New headers for the copy of a record read at ``source_topic/partition/offset``.

    See the module docstring for the invariants. The input is not modified.
    """
    src = SrcRef(source_cluster_id, source_topic, partition, offset)
    earlier, first_topic = prior(headers)
    # An entry that is no cluster.id (a ',' or '/' in a hand-written legacy header) names
    # no cluster a puller could copy into, and the new form could not hold it.
    chain = [cluster for cluster in earlier if is_cluster_id(cluster)]
    if not chain or chain[-1] != source_cluster_id:
        chain.append(source_cluster_id)
    kept = [(name, value) for name, value in headers if name not in STAMPED]
    return [*kept, (PROV, encode(chain, src, first_topic or source_topic))]


class Stamper:
    """:func:`stamp` for the records of one source partition, the puller's hot path: a
    record with no provenance header (a first hop, most records) gets ``crossfeed-prov``
    appended without parsing anything — the same header :func:`stamp` gives it."""

    __slots__ = ("_prefix", "partition", "source_cluster_id", "source_topic")

    def __init__(self, source_cluster_id: str, source_topic: str, partition: int) -> None:
        SrcRef(source_cluster_id, source_topic, partition, 0)  # refuses what stamp refuses
        self.source_cluster_id = source_cluster_id
        self.source_topic = source_topic
        self.partition = partition
        self._prefix = f"{source_cluster_id}/{source_topic}/{partition}/".encode()  # + offset

    def first_hop(self, headers: Sequence[Header], offset: int) -> list[Header]:
        """The headers of a record at ``offset`` that carries none of :data:`STAMPED`."""
        return [*headers, (PROV, b"%s%d" % (self._prefix, offset))]

    def stamp(self, headers: Sequence[Header], offset: int) -> list[Header]:
        """:func:`stamp` of the record at ``offset``."""
        return stamp(
            headers,
            source_cluster_id=self.source_cluster_id,
            source_topic=self.source_topic,
            partition=self.partition,
            offset=offset,
        )
