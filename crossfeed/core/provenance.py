"""Provenance stamping and loop prevention (docs/design.md: guarantee 4, Wire contract).

Headers use confluent-kafka's form: a list of ``(name, value)`` pairs, order preserved,
duplicates allowed, ``value`` bytes or ``None``.

Invariants of :func:`stamp` (each is a property test):

A. User headers (names not starting with ``crossfeed-``) come out byte-identical and in
   their original relative order, duplicates included.
B. The output holds exactly one ``crossfeed-origin-cluster``, ``crossfeed-origin-topic``,
   ``crossfeed-hops`` and ``crossfeed-src`` header, appended after all other headers.
C. Origin headers are set once, on the first hop: an existing non-empty value is kept.
D. ``crossfeed-hops`` is the existing hop list plus the source cluster.id, oldest first;
   the source is not appended when it is already the last entry (a re-stamp is idempotent).
E. ``crossfeed-src`` always describes the copy just read (``<cluster.id>/<topic>/
   <partition>/<offset>``); any earlier value is replaced.
F. Every other ``crossfeed-*`` header (``crossfeed-commit-ts``, ``crossfeed-txn``,
   ``crossfeed-type``, unknown future ones) is kept untouched, in place.

Loop prevention: a record is copied to a target cluster only if that cluster's cluster.id
is neither in its hop list nor its origin cluster (:func:`should_copy`). Because the puller
stamps the *source* cluster.id, a record that went A→B carries hops ``[A]`` in B, and the
B→A puller refuses it; a record that went A→B→C carries ``[A, B]`` in C.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from crossfeed.wire import grammar
from crossfeed.wire.headers import HOPS, ORIGIN_CLUSTER, ORIGIN_TOPIC, SRC, is_crossfeed_header

Header: TypeAlias = tuple[str, bytes | None]
"""One Kafka header as confluent-kafka gives it: ``(name, value)``."""

STAMPED: Final = (ORIGIN_CLUSTER, ORIGIN_TOPIC, HOPS, SRC)
"""The headers :func:`stamp` owns, in the order it appends them."""

_CLUSTER_ID = re.compile(r"[^,/\s]+")
_SRC = re.compile(grammar.SRC.python())


@dataclass(frozen=True, slots=True)
class SrcRef:
    """The parsed ``crossfeed-src`` header: the source copy a record was read from."""

    cluster_id: str
    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        _check_cluster_id(self.cluster_id)
        if not self.topic:
            raise ValueError("crossfeed-src: topic must not be empty")
        if self.partition < 0 or self.offset < 0:
            raise ValueError(
                f"crossfeed-src: partition and offset must be >= 0, "
                f"got partition={self.partition} offset={self.offset}"
            )

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.topic}/{self.partition}/{self.offset}"

    def encode(self) -> bytes:
        """The header value (UTF-8)."""
        return str(self).encode()


def _check_cluster_id(cluster_id: str) -> None:
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise ValueError(
            f"invalid cluster.id {cluster_id!r}: it must be non-empty and contain no ',', '/' "
            "or whitespace"
        )


def _decode(name: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} header is not valid UTF-8: {value!r}") from exc


def _first_value(headers: Sequence[Header], name: str) -> bytes | None:
    """Value of the first header called ``name`` with a non-empty value, else None."""
    for key, value in headers:
        if key == name and value:
            return value
    return None


def hops(headers: Sequence[Header]) -> list[str]:
    """The cluster.ids in ``crossfeed-hops``, oldest first.

    Empty entries are ignored. Should a record carry several ``crossfeed-hops`` headers
    (crossfeed never writes that), their lists are concatenated in header order, so loop
    prevention stays conservative. Raises ValueError if a value is not UTF-8.
    """
    result: list[str] = []
    for name, value in headers:
        if name != HOPS or value is None:
            continue
        result.extend(part.strip() for part in _decode(HOPS, value).split(",") if part.strip())
    return result


def should_copy(headers: Sequence[Header], target_cluster_id: str) -> bool:
    """False when the record has already been in the target cluster (copying would loop)."""
    if target_cluster_id in hops(headers):
        return False
    origin = _first_value(headers, ORIGIN_CLUSTER)
    return origin is None or _decode(ORIGIN_CLUSTER, origin) != target_cluster_id


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
    chain = hops(headers)
    if not chain or chain[-1] != source_cluster_id:
        chain.append(source_cluster_id)
    origin_cluster = _first_value(headers, ORIGIN_CLUSTER) or source_cluster_id.encode()
    origin_topic = _first_value(headers, ORIGIN_TOPIC) or source_topic.encode()
    kept = [(name, value) for name, value in headers if name not in STAMPED]
    return [
        *kept,
        (ORIGIN_CLUSTER, origin_cluster),
        (ORIGIN_TOPIC, origin_topic),
        (HOPS, ",".join(chain).encode()),
        (SRC, src.encode()),
    ]


class Stamper:
    """:func:`stamp` for the records of one source partition, the puller's hot path: a
    record with none of the headers it owns (a first hop, most records) gets them
    appended without parsing anything — the same headers :func:`stamp` gives it."""

    __slots__ = ("_first_hop", "_src", "partition", "source_cluster_id", "source_topic")

    def __init__(self, source_cluster_id: str, source_topic: str, partition: int) -> None:
        self.source_cluster_id = source_cluster_id
        self.source_topic = source_topic
        self.partition = partition
        source = source_cluster_id.encode()
        self._first_hop = (
            (ORIGIN_CLUSTER, source),
            (ORIGIN_TOPIC, source_topic.encode()),
            (HOPS, source),
        )
        self._src = b"%s/%s/%d/" % (source, source_topic.encode(), partition)  # + offset

    def first_hop(self, headers: Sequence[Header], offset: int) -> list[Header]:
        """The headers of a record at ``offset`` that carries none of :data:`STAMPED`."""
        return [*headers, *self._first_hop, (SRC, b"%s%d" % (self._src, offset))]

    def stamp(self, headers: Sequence[Header], offset: int) -> list[Header]:
        """:func:`stamp` of the record at ``offset``."""
        return stamp(
            headers,
            source_cluster_id=self.source_cluster_id,
            source_topic=self.source_topic,
            partition=self.partition,
            offset=offset,
        )


def parse_src(value: bytes) -> SrcRef:
    """Parse a ``crossfeed-src`` value ``<cluster.id>/<topic>/<partition>/<offset>`` by the
    grammar (crossfeed/wire/grammar.py: SRC, the bounds of every reader: a partition of at
    most 9 digits, an offset of at most 2^63-1, no '/' in a topic, as Kafka's topic names).
    Raises ValueError naming the bad value.
    """
    text = _decode(SRC, value)
    match = _SRC.fullmatch(text)
    if match is None or not grammar.fits_long(match[4]):
        raise ValueError(
            f"crossfeed-src {text!r}: expected <cluster.id>/<topic>/<partition>/<offset>, "
            "partition and offset decimal integers (9 and 19 digits at most, offset at most "
            "2^63-1)"
        )
    try:
        return SrcRef(match[1], match[2], int(match[3]), int(match[4]))
    except ValueError as exc:
        raise ValueError(f"crossfeed-src {text!r}: {exc}") from exc
