"""The provenance a record carries, read from either of its two wire forms.

``crossfeed-prov`` (what pullers write): ``<hops>/<topic>/<partition>/<offset>[/<origin
topic>]`` (crossfeed/wire/grammar.py: PROV; :class:`Provenance`). The legacy form, written
by pullers before it and still read, is four headers: ``crossfeed-origin-cluster``,
``crossfeed-origin-topic``, ``crossfeed-hops`` and ``crossfeed-src``. A feed upgraded
mid-stream holds both in one topic, so every reader here takes either, by these rules:

* hop list (loop prevention): every cluster.id that any ``crossfeed-prov`` or
  ``crossfeed-hops`` names, in header order, with a legacy origin cluster put first when
  the list does not start with it — never fewer clusters than either form names;
* source copy: the first non-empty ``crossfeed-prov`` if it parses, else the first
  non-empty ``crossfeed-src`` if that does (the sorter's rule too);
* origin topic: that of the first ``crossfeed-prov`` that keeps to the grammar, else the
  first non-empty ``crossfeed-origin-topic``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar

from crossfeed.wire import grammar
from crossfeed.wire.headers import (
    HOPS,
    LEGACY_PROVENANCE,
    ORIGIN_CLUSTER,
    ORIGIN_TOPIC,
    PROV,
    SRC,
)

Header: TypeAlias = tuple[str, bytes | None]
"""One Kafka header as confluent-kafka gives it: ``(name, value)``."""

STAMPED: Final = frozenset((PROV, *LEGACY_PROVENANCE))
"""Every header a stamp owns: it reads them and replaces them by one ``crossfeed-prov``."""

_CLUSTER_ID = re.compile(r"[^,/\s]+")
_PROV = re.compile(grammar.PROV.python())
_SRC = re.compile(grammar.SRC.python())
Match: TypeAlias = re.Match[str]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SrcRef:
    """The copy a record was read from: cluster.id, topic, partition, offset."""

    cluster_id: str
    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        _check_cluster_id(self.cluster_id)
        if not self.topic:
            raise ValueError("source topic must not be empty")
        if self.partition < 0 or self.offset < 0:
            raise ValueError(
                f"source partition and offset must be >= 0, "
                f"got partition={self.partition} offset={self.offset}"
            )

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.topic}/{self.partition}/{self.offset}"

    def encode(self) -> bytes:
        """The legacy ``crossfeed-src`` value (UTF-8)."""
        return str(self).encode()


@dataclass(frozen=True, slots=True)
class Provenance:
    """A parsed ``crossfeed-prov``: ``hops[0]`` is the origin cluster and ``hops[-1]`` the
    cluster of ``src``, the copy just read."""

    hops: tuple[str, ...]
    src: SrcRef
    origin_topic: str

    def __post_init__(self) -> None:
        for cluster_id in self.hops:
            _check_cluster_id(cluster_id)
        if not self.hops or self.hops[-1] != self.src.cluster_id:
            raise ValueError(f"the last hop of {self.hops} must be {self.src.cluster_id!r}")
        if not self.origin_topic or "/" in self.origin_topic:
            raise ValueError(f"origin topic {self.origin_topic!r}: empty or holding '/'")

    @property
    def origin_cluster(self) -> str:
        return self.hops[0]

    def encode(self) -> bytes:
        """The header value (UTF-8)."""
        return encode(self.hops, self.src, self.origin_topic)


def encode(chain: Sequence[str], src: SrcRef, first_topic: str) -> bytes:
    """The ``crossfeed-prov`` value of hop list ``chain`` (cluster.ids, the last one
    ``src``'s), source copy ``src`` and origin topic ``first_topic``, which is written only
    where it is not src's topic. Checks nothing: :class:`Provenance` does."""
    tail = "" if first_topic == src.topic else f"/{first_topic}"
    return f"{','.join(chain)}/{src.topic}/{src.partition}/{src.offset}{tail}".encode()


def is_cluster_id(text: str) -> bool:
    """A cluster.id the wire can carry: non-empty, no ',', '/' or whitespace."""
    return _CLUSTER_ID.fullmatch(text) is not None


def _check_cluster_id(cluster_id: str) -> None:
    if not is_cluster_id(cluster_id):
        raise ValueError(
            f"invalid cluster.id {cluster_id!r}: it must be non-empty and contain no ',', '/' "
            "or whitespace"
        )


def _decode(name: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} header is not valid UTF-8: {value!r}") from exc


def _split_hops(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def hops(headers: Sequence[Header]) -> list[str]:
    """The cluster.ids the record has been in, oldest first, from either form (see the
    module docstring).

    Empty entries are ignored, and a ``crossfeed-prov`` that does not parse still gives
    the hop list before its first '/', so loop prevention stays conservative. Raises
    ValueError if a value is not UTF-8.
    """
    return prior(headers, with_topic=False)[0]


def prior(headers: Sequence[Header], *, with_topic: bool = True) -> tuple[list[str], str | None]:
    """:func:`hops` and :func:`origin_topic` in one pass over the headers (a stamp needs
    both, on the puller's path); the topic is left out (None) unless ``with_topic``, which
    costs a parse (a loop check needs the hops alone)."""
    chain: list[str] = []
    legacy_origin = ""
    topic: str | None = None
    legacy_topic: str | None = None
    for name, value in headers:
        if not value or name not in STAMPED:
            continue
        if name == PROV:
            text = _decode(PROV, value)
            chain.extend(_split_hops(text.partition("/")[0]))
            if with_topic and topic is None:
                topic = _origin_of(text)
        elif name == HOPS:
            chain.extend(_split_hops(_decode(HOPS, value)))
        elif name == ORIGIN_CLUSTER:
            legacy_origin = legacy_origin or _decode(ORIGIN_CLUSTER, value).strip()
        elif name == ORIGIN_TOPIC and with_topic and legacy_topic is None:
            legacy_topic = _decode(ORIGIN_TOPIC, value)  # (no topic name holds '/')
    if legacy_origin and (not chain or chain[0] != legacy_origin):
        chain.insert(0, legacy_origin)
    if with_topic and topic is None and legacy_topic and "/" not in legacy_topic:
        topic = legacy_topic
    return chain, topic


def _origin_of(text: str) -> str | None:
    """The origin topic of a ``crossfeed-prov`` value, None if it breaks the grammar."""
    match = _PROV.fullmatch(text)
    if match is None or not grammar.fits_long(match["offset"]):
        return None
    return match["origin_topic"] or match["topic"]


_BOUNDS = "partition and offset decimal integers (9 and 19 digits at most, offset at most 2^63-1)"


def _parsed(
    name: str, pattern: re.Pattern[str], value: bytes, shape: str, build: Callable[[Match], T]
) -> T:
    """``build`` of ``value`` (header ``name``) matched whole by ``pattern``, its offset
    within the grammar's bounds; a ValueError names the header, the value and the
    ``shape`` expected, or what ``build`` refused."""
    text = _decode(name, value)
    match = pattern.fullmatch(text)
    if match is None or not grammar.fits_long(match["offset"]):
        raise ValueError(f"{name} {text!r}: expected {shape}, {_BOUNDS}")
    try:
        return build(match)
    except ValueError as exc:
        raise ValueError(f"{name} {text!r}: {exc}") from exc


def _provenance(match: Match) -> Provenance:
    src = SrcRef(match["cluster"], match["topic"], int(match["partition"]), int(match["offset"]))
    chain = (*match["earlier"].split(",")[:-1], src.cluster_id)
    return Provenance(chain, src, match["origin_topic"] or src.topic)


def parse_prov(value: bytes) -> Provenance:
    """Parse a ``crossfeed-prov`` value by the grammar (crossfeed/wire/grammar.py: PROV,
    the bounds every reader shares: a partition of at most 9 digits, an offset of at most
    2^63-1). Raises ValueError naming the bad value."""
    shape = "<hops>/<topic>/<partition>/<offset>[/<origin topic>]"
    return _parsed(PROV, _PROV, value, shape, _provenance)


def parse_src(value: bytes) -> SrcRef:
    """Parse a legacy ``crossfeed-src`` value ``<cluster.id>/<topic>/<partition>/<offset>``
    by the grammar (crossfeed/wire/grammar.py: SRC, the bounds of :func:`parse_prov`).
    Raises ValueError naming the bad value.
    """
    shape = "<cluster.id>/<topic>/<partition>/<offset>"
    return _parsed(SRC, _SRC, value, shape, lambda m: SrcRef(m[1], m[2], int(m[3]), int(m[4])))


def _first_value(headers: Sequence[Header], name: str) -> bytes | None:
    """Value of the first header called ``name`` with a non-empty value, else None."""
    for key, value in headers:
        if key == name and value:
            return value
    return None


def src_of(headers: Sequence[Header]) -> SrcRef | None:
    """The copy the record was read from: the first non-empty ``crossfeed-prov`` if it
    parses, else the first non-empty legacy ``crossfeed-src`` if that does (as the sorter
    reads them); None when neither names one."""
    prov = _first_value(headers, PROV)
    if prov is not None:
        try:
            return parse_prov(prov).src
        except ValueError:
            pass
    src = _first_value(headers, SRC)
    try:
        return None if src is None else parse_src(src)
    except ValueError:
        return None


def origin_topic(headers: Sequence[Header]) -> str | None:
    """The topic the record was first produced to: that of the first ``crossfeed-prov``
    that keeps to the grammar, else the first non-empty legacy ``crossfeed-origin-topic``;
    None when no header says it. Raises ValueError if a value is not UTF-8."""
    return prior(headers)[1]
