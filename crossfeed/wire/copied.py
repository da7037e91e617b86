"""Copied records on their way through ``_crossfeed.<feed>.changes`` (``CopiedRecords``).

The puller groups the records it copies from one source partition into packs: one staging
record holds hundreds of source records, column-wise (offsets, timestamps, key sizes and
keys, value sizes and values, headers), so the per-record work on both sides is a few
list appends and slices instead of a Kafka record of its own — producing, storing,
fetching and parsing a staging record per source record was most of the mirror path's
cost. ``schemas/CopiedRecords.avsc`` documents every column.

Invariants (unit and property tests in tests/unit/test_wire_copied.py):

A. ``decode(Pack.encode())`` gives back every record exactly: offset, timestamp, key and
   value (None and b"" stay different), headers in order with duplicates and None values.
B. Offsets in a pack strictly increase; :meth:`Pack.add` refuses anything else.
C. A value that is not a well-formed pack — a column of the wrong length, sizes that do not
   add up to their bytes, a negative count — raises :class:`CodecError`, never another
   exception, so the sink can dead-letter it.
"""

from __future__ import annotations

import functools
import operator
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from crossfeed.wire import codec
from crossfeed.wire.codec import CodecError
from crossfeed.wire.headers import HOPS, ORIGIN_CLUSTER, ORIGIN_TOPIC, SRC

RECORD: Final = "CopiedRecords"
OVERHEAD_BYTES: Final = 24
"""Bytes a pack spends per record beyond key, value and headers (the column entries)."""

_LITTLE = sys.byteorder == "little"

Header = tuple[str, bytes | None]
Copy = tuple[int, int, bytes | None, bytes | None, list[Header]]
"""One record as the sink writes it: offset, timestamp (ms, -1 none), key, value, and
every header of the target copy, ``crossfeed-src`` last."""


def _pack(kind: str, values: Sequence[int]) -> bytes:
    column = array(kind, values)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def _unpack(kind: str, data: bytes, count: int, name: str) -> array[int]:
    column: array[int] = array(kind)
    if len(data) != count * column.itemsize:
        raise CodecError(
            f"CopiedRecords column {name} holds {len(data)} bytes, expected "
            f"{count * column.itemsize} for {count} records"
        )
    column.frombytes(data)
    if not _LITTLE:
        column.byteswap()
    return column


class Pack:
    """The records of one source partition being packed (the puller's side)."""

    __slots__ = (
        "first_hop",
        "header_counts",
        "header_name_sizes",
        "header_names",
        "header_value_sizes",
        "header_values",
        "key_sizes",
        "keys",
        "offsets",
        "partition",
        "size",
        "source_cluster",
        "timestamps",
        "topic",
        "value_sizes",
        "values",
    )

    def __init__(self, source_cluster: str, topic: str, partition: int) -> None:
        self.source_cluster = source_cluster
        self.topic = topic
        self.partition = partition
        self.size = 0
        """Bytes of keys, values, headers and column entries so far (about the encoding)."""
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.key_sizes: list[int] = []
        self.keys: list[bytes] = []
        self.value_sizes: list[int] = []
        self.values: list[bytes] = []
        # Filled only once a record has headers / is not a first hop: the common pack of
        # header-less first-hop records never touches them.
        self.header_counts: list[int] | None = None
        self.header_name_sizes: list[int] = []
        self.header_names: list[bytes] = []
        self.header_value_sizes: list[int] = []
        self.header_values: list[bytes] = []
        self.first_hop: bytearray | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None = None,
        first_hop: bool = True,
    ) -> None:
        """Append one record. ``headers``: what the copy carries before the provenance the
        sink adds — the user headers of a first hop, or every header but ``crossfeed-src``
        of a record restamped on a later hop (``first_hop=False``)."""
        offsets = self.offsets
        if offsets and offset <= offsets[-1]:
            raise ValueError(f"offset {offset} after {offsets[-1]}: a pack's offsets increase")
        offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        size = OVERHEAD_BYTES
        if key is None:
            self.key_sizes.append(-1)
        else:
            self.key_sizes.append(len(key))
            self.keys.append(key)
            size += len(key)
        if value is None:
            self.value_sizes.append(-1)
        else:
            self.value_sizes.append(len(value))
            self.values.append(value)
            size += len(value)
        if headers or self.header_counts is not None:
            size += self._add_headers(headers or ())
        if not first_hop or self.first_hop is not None:
            if self.first_hop is None:
                self.first_hop = bytearray(b"\x01" * (len(offsets) - 1))
            self.first_hop.append(1 if first_hop else 0)
        self.size += size

    def _add_headers(self, headers: Sequence[Header]) -> int:
        if self.header_counts is None:
            self.header_counts = [0] * (len(self.offsets) - 1)
        self.header_counts.append(len(headers))
        size = 0
        for name, value in headers:
            encoded = name.encode()
            self.header_name_sizes.append(len(encoded))
            self.header_names.append(encoded)
            size += len(encoded) + 8
            if value is None:
                self.header_value_sizes.append(-1)
            else:
                self.header_value_sizes.append(len(value))
                self.header_values.append(value)
                size += len(value)
        return size

    def encode(self) -> bytes:
        """The ``CopiedRecords`` value (Avro single-object encoding): written here field by
        field into one join — byte for byte what ``codec.encode`` writes (unit-tested),
        without fastavro's two further copies of every key and value."""
        parts: list[bytes] = [_header()]
        for text in (self.source_cluster, self.topic):
            encoded = text.encode()
            parts += (_long(len(encoded)), encoded)
        parts += (_long(self.partition), _long(len(self.offsets)))
        for column in (
            _pack("q", self.offsets),
            _pack("q", self.timestamps),
            _pack("i", self.key_sizes),
            self.keys,
            _pack("i", self.value_sizes),
            self.values,
            _pack("i", self.header_counts or ()),
            _pack("i", self.header_name_sizes),
            self.header_names,
            _pack("i", self.header_value_sizes),
            self.header_values,
            bytes(self.first_hop or b""),
        ):
            if isinstance(column, list):  # pieces of one bytes field, joined below
                parts.append(_long(sum(map(len, column))))
                parts += column
            else:
                parts += (_long(len(column)), column)
        return b"".join(parts)


_SMALL = [bytes([z]) for z in range(0x80)]  # the one-byte Avro longs, ready-made


def _long(n: int) -> bytes:
    """An Avro int/long: zig-zag, then 7 bits a byte, least significant first."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


@functools.cache
def _header() -> bytes:
    """Magic and fingerprint of the current CopiedRecords schema (single-object encoding)."""
    return codec.MAGIC + codec.fingerprint(RECORD).to_bytes(8, "little")


@dataclass(frozen=True)
class CopiedRecords:
    """A decoded pack (the sink's side); :meth:`copies` yields the target records."""

    source_cluster: str
    topic: str
    partition: int
    offsets: array[int]
    timestamps: array[int]
    key_sizes: array[int]
    keys: bytes
    value_sizes: array[int]
    values: bytes
    headers: list[list[Header]] | None
    first_hop: bytes

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def src_prefix(self) -> bytes:
        """``crossfeed-src`` up to the offset."""
        return f"{self.source_cluster}/{self.topic}/{self.partition}/".encode()

    def provenance(self) -> list[Header]:
        """The first-hop provenance headers (all but ``crossfeed-src``)."""
        cluster = self.source_cluster.encode()
        return [(ORIGIN_CLUSTER, cluster), (ORIGIN_TOPIC, self.topic.encode()), (HOPS, cluster)]

    def max_record_bytes(self) -> int:
        """Key + value bytes of the largest record (a cheap bound for size checks)."""
        if not self.offsets:
            return 0
        return max(self.key_sizes) + max(self.value_sizes)

    def copies(self) -> Iterator[Copy]:
        """Every record with the full header list of its target copy (the sink's hot
        loop: plain locals and one zip, no per-record attribute or index lookups)."""
        first = self.provenance()
        prefix = self.src_prefix
        keys, values = self.keys, self.values
        key_at = value_at = 0
        headers, first_hop = self.headers, self.first_hop
        simple = headers is None and not first_hop  # header-less first hops: the usual
        columns = zip(self.offsets, self.timestamps, self.key_sizes, self.value_sizes, strict=True)
        for i, (offset, timestamp, key_size, value_size) in enumerate(columns):
            if key_size < 0:
                key = None
            else:
                key = keys[key_at : key_at + key_size]
                key_at += key_size
            if value_size < 0:
                value = None
            else:
                value = values[value_at : value_at + value_size]
                value_at += value_size
            src = (SRC, prefix + b"%d" % offset)
            if simple:
                yield offset, timestamp, key, value, [*first, src]
                continue
            own = headers[i] if headers is not None else []
            if not first_hop or first_hop[i]:
                yield offset, timestamp, key, value, [*own, *first, src]
            else:
                yield offset, timestamp, key, value, [*own, src]


def decode(value: bytes) -> CopiedRecords:
    """A ``CopiedRecords`` value, checked column by column; CodecError if malformed."""
    raw = _fields(value)
    count = raw["count"]
    if count < 0:
        raise CodecError(f"CopiedRecords count is negative ({count})")
    offsets = _unpack("q", raw["offsets"], count, "offsets")
    if not all(map(operator.lt, offsets, offsets[1:])):
        raise CodecError("CopiedRecords offsets do not increase")
    key_sizes = _unpack("i", raw["key_sizes"], count, "key_sizes")
    value_sizes = _unpack("i", raw["value_sizes"], count, "value_sizes")
    _check_total(key_sizes, raw["keys"], "keys")
    _check_total(value_sizes, raw["values"], "values")
    first_hop = raw["first_hop"]
    if first_hop and len(first_hop) != count:
        raise CodecError(f"CopiedRecords first_hop has {len(first_hop)} entries, not {count}")
    return CopiedRecords(
        source_cluster=raw["source_cluster"],
        topic=raw["topic"],
        partition=raw["partition"],
        offsets=offsets,
        timestamps=_unpack("q", raw["timestamps_ms"], count, "timestamps_ms"),
        key_sizes=key_sizes,
        keys=raw["keys"],
        value_sizes=value_sizes,
        values=raw["values"],
        headers=_headers(raw, count),
        first_hop=first_hop,
    )


_STRINGS = ("source_cluster", "topic")
_INTS = ("partition", "count")
_BYTES = (
    "offsets",
    "timestamps_ms",
    "key_sizes",
    "keys",
    "value_sizes",
    "values",
    "header_counts",
    "header_name_sizes",
    "header_names",
    "header_value_sizes",
    "header_values",
    "first_hop",
)


def _fields(value: bytes) -> dict[str, Any]:
    """The fields of a ``CopiedRecords`` value: read here when the current schema wrote it,
    else by codec.decode, which resolves an older writer's schema."""
    return _read(value) if value.startswith(_header()) else codec.decode(RECORD, value)


def _read(value: bytes) -> dict[str, Any]:
    """The fields of a value written with the current schema (the sink's hot path: one
    slice per field)."""
    raw: dict[str, Any] = {}
    at = len(_header())
    end = len(value)

    def long() -> int:
        nonlocal at
        z = shift = 0
        while True:
            if at >= end or shift > 63:
                raise CodecError("cannot decode CopiedRecords: corrupt or truncated body")
            b = value[at]
            at += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                return (z >> 1) ^ -(z & 1)
            shift += 7

    def field() -> bytes:
        nonlocal at
        size = long()
        if size < 0 or at + size > end:
            raise CodecError("cannot decode CopiedRecords: corrupt or truncated body")
        at += size
        return value[at - size : at]

    try:
        for name in _STRINGS:
            raw[name] = field().decode()
    except UnicodeDecodeError as err:
        raise CodecError(f"cannot decode CopiedRecords: a string is not UTF-8: {err}") from None
    for name in _INTS:
        raw[name] = long()
        if not -(2**31) <= raw[name] < 2**31:
            raise CodecError(f"cannot decode CopiedRecords: {name} is out of int range")
    for name in _BYTES:
        raw[name] = field()
    if at != end:
        raise CodecError(f"cannot decode CopiedRecords: {end - at} bytes of trailing data")
    return raw


def _check_total(sizes: array[int], data: bytes, name: str) -> None:
    # -1 (null) is the only negative size: sum + nulls is then the bytes the sizes need.
    total = sum(sizes) + sizes.count(-1)
    if total != len(data) or (sizes and min(sizes) < -1):
        raise CodecError(
            f"CopiedRecords {name}: sizes add up to {total} bytes but the column holds {len(data)}"
        )


def _headers(raw: dict[str, Any], count: int) -> list[list[Header]] | None:
    if not raw["header_counts"]:
        if raw["header_name_sizes"] or raw["header_names"] or raw["header_values"]:
            raise CodecError("CopiedRecords has header bytes but no header_counts")
        return None
    counts = _unpack("i", raw["header_counts"], count, "header_counts")
    if any(c < 0 for c in counts):
        raise CodecError("CopiedRecords header_counts holds a negative count")
    total = sum(counts)
    name_sizes = _unpack("i", raw["header_name_sizes"], total, "header_name_sizes")
    value_sizes = _unpack("i", raw["header_value_sizes"], total, "header_value_sizes")
    if any(s < 0 for s in name_sizes):
        raise CodecError("CopiedRecords header_name_sizes holds a negative size")
    _check_total(name_sizes, raw["header_names"], "header_names")
    _check_total(value_sizes, raw["header_values"], "header_values")
    names, values = raw["header_names"], raw["header_values"]
    out: list[list[Header]] = []
    h = name_at = value_at = 0
    try:
        for c in counts:
            record: list[Header] = []
            for _ in range(c):
                size = name_sizes[h]
                name = names[name_at : name_at + size].decode()
                name_at += size
                size = value_sizes[h]
                if size < 0:
                    record.append((name, None))
                else:
                    record.append((name, values[value_at : value_at + size]))
                    value_at += size
                h += 1
            out.append(record)
    except UnicodeDecodeError as err:
        raise CodecError(f"CopiedRecords header name is not UTF-8: {err}") from None
    return out


def count(value: bytes) -> int:
    """Records in a ``CopiedRecords`` value (CodecError if it is none)."""
    return int(_fields(value)["count"])
