"""Unit and property tests for crossfeed.wire.copied (packs of copied records)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core import provenance
from crossfeed.wire import codec, copied
from crossfeed.wire.codec import CodecError
from crossfeed.wire.headers import HOPS, ORIGIN_CLUSTER, ORIGIN_TOPIC, SRC

pytestmark = pytest.mark.unit

CLUSTER = "Zx3kQ9tDSuGp8v2mYc1aBw"
OTHER = "Pq7rT2uVwX9yZ0aB1cD2eF"

maybe_bytes = st.none() | st.binary(max_size=40)
header = st.tuples(st.text(max_size=12), maybe_bytes)
record = st.tuples(
    st.integers(min_value=1, max_value=1000),  # offset step
    st.integers(min_value=-1, max_value=2**45),  # timestamp
    maybe_bytes,
    maybe_bytes,
    st.none() | st.lists(header, max_size=4),
    st.booleans(),
)


def _expected(run_records: list[Any], topic: str, partition: int) -> list[Any]:
    out = []
    offset = -1
    for step, ts, key, value, hdrs, first_hop in run_records:
        offset += step
        own = list(hdrs or [])
        src = (SRC, f"{CLUSTER}/{topic}/{partition}/{offset}".encode())
        if first_hop:
            first = [
                (ORIGIN_CLUSTER, CLUSTER.encode()),
                (ORIGIN_TOPIC, topic.encode()),
                (HOPS, CLUSTER.encode()),
            ]
            out.append((offset, ts, key, value, [*own, *first, src]))
        else:
            out.append((offset, ts, key, value, [*own, src]))
    return out


@given(st.lists(record, max_size=30), st.sampled_from(["orders", "a.b-c_d", "t/with/slash"]))
def test_round_trip_gives_every_record_back(records: list[Any], topic: str) -> None:
    pack = copied.Pack(CLUSTER, topic, 5)
    offset = -1
    for step, ts, key, value, hdrs, first_hop in records:
        offset += step
        pack.add(offset, ts, key, value, hdrs, first_hop)
    decoded = copied.decode(pack.encode())
    assert len(decoded) == len(records) == len(pack)
    assert (decoded.source_cluster, decoded.topic, decoded.partition) == (CLUSTER, topic, 5)
    assert list(decoded.copies()) == _expected(records, topic, 5)


def test_null_and_empty_stay_different() -> None:
    pack = copied.Pack(CLUSTER, "t", 0)
    pack.add(0, 1, None, b"")
    pack.add(1, 2, b"", None)
    pack.add(2, 3, b"k", b"v", [("h", None), ("h", b""), ("h", b"x")])
    got = [(k, v, h[:3]) for _, _, k, v, h in copied.decode(pack.encode()).copies()]
    assert got[0][:2] == (None, b"")
    assert got[1][:2] == (b"", None)
    assert got[2] == (b"k", b"v", [("h", None), ("h", b""), ("h", b"x")])


def test_a_restamped_record_gets_exactly_what_stamp_gives() -> None:
    """A later hop: the puller stores stamp()'s headers but crossfeed-src; the sink's
    copy is then byte for byte what provenance.stamp says."""
    arriving = [
        ("trace", b"1"),
        (ORIGIN_CLUSTER, OTHER.encode()),
        (ORIGIN_TOPIC, b"orders"),
        (HOPS, OTHER.encode()),
        (SRC, f"{OTHER}/orders/0/3".encode()),
    ]
    stamped = provenance.stamp(
        arriving, source_cluster_id=CLUSTER, source_topic="orders", partition=2, offset=40
    )
    pack = copied.Pack(CLUSTER, "orders", 2)
    pack.add(40, 7, b"k", b"v", stamped[:-1], first_hop=False)
    (copy,) = copied.decode(pack.encode()).copies()
    assert copy[4] == stamped


def test_offsets_must_increase() -> None:
    pack = copied.Pack(CLUSTER, "t", 0)
    pack.add(5, 0, None, None)
    with pytest.raises(ValueError, match="increase"):
        pack.add(5, 0, None, None)


def test_size_counts_keys_values_and_headers() -> None:
    pack = copied.Pack(CLUSTER, "t", 0)
    pack.add(0, 0, b"kk", b"v" * 100)
    assert pack.size == 102 + copied.OVERHEAD_BYTES
    pack.add(1, 0, None, None, [("name", b"12345")])
    assert pack.size == 102 + 2 * copied.OVERHEAD_BYTES + len("name") + 8 + 5


def test_count_reads_the_number_of_records() -> None:
    pack = copied.Pack(CLUSTER, "t", 0)
    for offset in range(17):
        pack.add(offset, 0, None, b"x")
    assert copied.count(pack.encode()) == 17


def _raw(**changes: Any) -> bytes:
    pack = copied.Pack(CLUSTER, "t", 0)
    pack.add(3, 10, b"ab", b"cde", [("h", b"1")])
    pack.add(4, 11, None, b"f")
    fields = codec.decode(copied.RECORD, pack.encode())
    fields.update(changes)
    return codec.encode(copied.RECORD, fields)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"count": 3}, "offsets holds 16 bytes, expected 24"),
        ({"count": -1}, "negative"),
        ({"offsets": (4).to_bytes(8, "little") + (3).to_bytes(8, "little")}, "increase"),
        ({"keys": b"abc"}, "keys: sizes add up to 2 bytes but the column holds 3"),
        ({"values": b"cd"}, "values: sizes add up to 4 bytes"),
        ({"key_sizes": b"\x02\x00\x00\x00\xfe\xff\xff\xff"}, "keys"),
        ({"timestamps_ms": b"\x00" * 8}, "timestamps_ms holds 8 bytes"),
        ({"first_hop": b"\x01"}, "first_hop has 1 entries"),
        ({"header_counts": b""}, "header bytes but no header_counts"),
        ({"header_counts": b"\x02\x00\x00\x00\x00\x00\x00\x00"}, "header_name_sizes"),
        ({"header_names": b"\xff"}, "not UTF-8"),
        ({"header_values": b""}, "header_values: sizes add up to 1"),
    ],
)
def test_malformed_runs_are_codec_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(CodecError, match=message):
        copied.decode(_raw(**changes))


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    """Nothing but CodecError escapes (any other exception fails the test)."""
    with contextlib.suppress(CodecError):
        copied.decode(data)


def test_truncated_runs_are_codec_errors() -> None:
    value = _raw()
    for cut in range(1, len(value)):
        with pytest.raises(CodecError):
            copied.decode(value[:cut])


def _fields(pack: copied.Pack) -> dict[str, Any]:
    """The pack's fields as codec.encode takes them (the reference the fast path matches)."""
    return {
        "source_cluster": pack.source_cluster,
        "topic": pack.topic,
        "partition": pack.partition,
        "count": len(pack),
        "offsets": copied._pack("q", pack.offsets),
        "timestamps_ms": copied._pack("q", pack.timestamps),
        "key_sizes": copied._pack("i", pack.key_sizes),
        "keys": b"".join(pack.keys),
        "value_sizes": copied._pack("i", pack.value_sizes),
        "values": b"".join(pack.values),
        "header_counts": copied._pack("i", pack.header_counts or ()),
        "header_name_sizes": copied._pack("i", pack.header_name_sizes),
        "header_names": b"".join(pack.header_names),
        "header_value_sizes": copied._pack("i", pack.header_value_sizes),
        "header_values": b"".join(pack.header_values),
        "first_hop": bytes(pack.first_hop or b""),
    }


@given(
    st.lists(record, max_size=30),
    st.text(max_size=90),
    st.text(max_size=90),
    st.integers(min_value=0, max_value=2**31 - 1),
)
def test_the_fast_path_writes_and_reads_what_fastavro_does(
    records: list[Any], cluster: str, topic: str, partition: int
) -> None:
    """Pack.encode and decode skip fastavro for the current schema: the bytes and the
    fields must be exactly the codec's (multi-byte lengths and ints included)."""
    pack = copied.Pack(cluster, topic, partition)
    offset = -1
    for step, ts, key, value, hdrs, first_hop in records:
        offset += step
        pack.add(offset, ts, key, value, hdrs, first_hop)
    value = pack.encode()
    assert value == codec.encode(copied.RECORD, _fields(pack))
    assert copied._read(value) == codec.decode(copied.RECORD, value)


@given(st.binary(max_size=200))
def test_any_body_after_the_current_header_decodes_or_raises_codec_error(body: bytes) -> None:
    with contextlib.suppress(CodecError):
        copied.decode(copied._header() + body)
