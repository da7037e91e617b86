"""Unit tests for the ``__consumer_offsets`` parser and the book of latest commits.

The byte strings are built here field by field from Kafka's documented layouts (and one
written out in hex), so a parser and an encoder sharing a mistake cannot hide it; the
integration test reads what a real broker writes.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.translation.commit_log import (
    Commit,
    CommitBook,
    CommitKey,
    CommitLogError,
    CommitValue,
    commit_mode,
    parse_key,
    parse_value,
)

pytestmark = pytest.mark.unit


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _cs(text: str) -> bytes:
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def key(group: str, topic: str, partition: int, kind: int = 1) -> bytes:
    return struct.pack(">h", kind) + _s(group) + _s(topic) + struct.pack(">i", partition)


def value(
    version: int,
    offset: int,
    committed: int,
    *,
    epoch: int = -1,
    metadata: str = "",
    expire: int = -1,
    tags: dict[int, bytes] | None = None,
) -> bytes:
    out = struct.pack(">hq", version, offset)
    if version >= 3:
        out += struct.pack(">i", epoch)
    out += _cs(metadata) if version >= 4 else _s(metadata)
    out += struct.pack(">q", committed)
    if version == 1:
        out += struct.pack(">q", expire)
    if version >= 4:
        tags = tags or {}
        out += _uvarint(len(tags))
        for tag, data in sorted(tags.items()):
            out += _uvarint(tag) + _uvarint(len(data)) + data
    return out


# -- keys -----------------------------------------------------------------------------------


def test_key_in_hex_as_a_broker_writes_it():
    # type 1, "g1", "orders", partition 7
    raw = bytes.fromhex("00010002673100066f726465727300000007")
    assert parse_key(raw) == CommitKey("g1", "orders", 7)


@pytest.mark.parametrize("kind", [0, 1])
def test_both_offset_commit_key_types(kind):
    assert parse_key(key("grp/with/slashes", "t.é", 2**31 - 1, kind)) == CommitKey(
        "grp/with/slashes", "t.é", 2**31 - 1
    )


@pytest.mark.parametrize("kind", [2, 3, 4, 5, 6, 7, 8, 15, 32767])
def test_other_record_types_are_not_commits(kind):
    # Group metadata (2) and the newer protocols' records (3+) carry no offsets.
    assert parse_key(struct.pack(">h", kind) + _s("g")) is None


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "record type needs 2 bytes"),
        (b"\x00", "record type needs 2 bytes"),
        (b"\xff\xff", "negative record type"),
        (struct.pack(">h", 1) + _s("g"), "topic length needs 2 bytes"),
        (struct.pack(">h", 1) + _s("g") + _s("t") + b"\x00\x00", "partition needs 4 bytes"),
        (struct.pack(">hh", 1, -1), "group is null"),
        (struct.pack(">hh", 1, 10) + b"abc", "group needs 10 bytes"),
        (struct.pack(">hh", 1, 2) + b"\xff\xfe" + _s("t") + b"\0\0\0\0", "not UTF-8"),
        (key("g", "t", 0) + b"\x00", "1 unexpected bytes"),
    ],
)
def test_bad_keys_raise_a_clear_error(raw, says):
    with pytest.raises(CommitLogError, match=says):
        parse_key(raw)


# -- values ---------------------------------------------------------------------------------


def test_value_v3_in_hex_as_a_broker_writes_it():
    raw = bytes.fromhex(
        "0003"  # version
        "00000000000004d2"  # offset 1234
        "00000005"  # leader epoch 5
        "0000"  # metadata ""
        "0000019a8f1e2c00"  # commit timestamp
    )
    assert parse_value(raw) == CommitValue(1234, 0x19A8F1E2C00, 5, "")


def test_every_value_version():
    assert parse_value(value(0, 10, 1000, metadata="m")) == CommitValue(10, 1000, -1, "m")
    assert parse_value(value(1, 11, 1001, expire=9000)) == CommitValue(11, 1001, -1, "", 9000)
    assert parse_value(value(2, 12, 1002)) == CommitValue(12, 1002)
    assert parse_value(value(3, 13, 1003, epoch=7, metadata="x")) == CommitValue(13, 1003, 7, "x")
    assert parse_value(value(4, 14, 1004, epoch=8, metadata="é" * 200)) == CommitValue(
        14, 1004, 8, "é" * 200
    )


def test_v4_tagged_fields_topic_id_kept_unknown_tags_skipped():
    topic_id = bytes(range(16))
    raw = value(4, 5, 6, tags={0: topic_id, 9: b"future", 300: b""})
    assert parse_value(raw) == CommitValue(5, 6, -1, "", -1, topic_id)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "version needs 2 bytes"),
        (struct.pack(">h", 5) + b"\0" * 30, "version 5 is not one of the known 0-4"),
        (struct.pack(">h", -1), "version -1"),
        (value(3, 1, 2)[:-1], "commit timestamp needs 8 bytes"),
        (value(1, 1, 2)[:-8], "expire timestamp needs 8 bytes"),
        (value(2, 1, 2) + b"\0", "1 unexpected bytes"),
        (struct.pack(">hq", 4, 1) + struct.pack(">i", 0) + b"\x00", "metadata is null"),
        (struct.pack(">hqi", 4, 1, 0) + b"\xff\xff\xff\xff\xff\xff", "longer than 5 bytes"),
        (value(4, 1, 2, tags={0: b"short"}), "topic id of 5 bytes"),
        (value(4, 1, 2)[:-1], "tagged field count needs 1 bytes"),
    ],
)
def test_bad_values_raise_a_clear_error(raw, says):
    with pytest.raises(CommitLogError, match=says):
        parse_value(raw)


@given(st.binary(max_size=64))
def test_garbage_never_crashes(raw):
    # Either parses or raises CommitLogError (a ValueError the follower skips) — never
    # struct.error, IndexError, UnicodeDecodeError or anything else.
    for parse in (parse_key, parse_value):
        with contextlib.suppress(CommitLogError):
            parse(raw)


@given(
    st.integers(0, 4),
    st.integers(-1, 2**63 - 1),
    st.integers(0, 2**50),
    st.integers(-1, 2**31 - 1),
    st.text(max_size=40),
)
def test_values_round_trip(version, offset, committed, epoch, metadata):
    parsed = parse_value(value(version, offset, committed, epoch=epoch, metadata=metadata))
    assert (parsed.offset, parsed.commit_timestamp_ms, parsed.metadata) == (
        offset,
        committed,
        metadata,
    )
    assert parsed.leader_epoch == (epoch if version >= 3 else -1)


# -- the book -------------------------------------------------------------------------------


def _book() -> CommitBook:
    return CommitBook(lambda g: not g.startswith("skip"), lambda t: t != "other")


def test_book_keeps_the_latest_commit_and_reports_changes_once():
    book = _book()
    book.apply(key("g", "t", 0), value(3, 5, 100))
    book.apply(key("g", "t", 0), value(3, 9, 200))
    book.apply(key("g", "t", 1), value(1, 2, 150))
    assert book.get(("g", "t", 0)) == Commit(9, 200)
    assert book.take_changed() == {("g", "t", 0): Commit(9, 200), ("g", "t", 1): Commit(2, 150)}
    assert book.take_changed() == {}
    assert len(book) == 2


def test_book_tombstone_deletes_and_is_a_change():
    book = _book()
    book.apply(key("g", "t", 0), value(3, 5, 100))
    book.take_changed()
    book.apply(key("g", "t", 0), None)
    assert book.get(("g", "t", 0)) is None
    assert book.take_changed() == {("g", "t", 0): None}
    book.apply(key("g", "t", 0), None)  # deleting what is not there changes nothing
    assert book.take_changed() == {}


def test_book_negative_offset_means_no_position():
    book = _book()
    book.apply(key("g", "t", 0), value(3, 5, 100))
    book.apply(key("g", "t", 0), value(3, -1, 200))
    assert book.items() == []


def test_book_keeps_only_wanted_groups_and_topics():
    book = _book()
    book.apply(key("skip-me", "t", 0), value(3, 5, 100))
    book.apply(key("g", "other", 0), value(3, 5, 100))
    book.apply(key("skip-me", "t", 0), b"garbage of a group not wanted")  # never parsed
    book.apply(struct.pack(">h", 2) + _s("g"), b"group metadata, whatever it holds")
    assert len(book) == 0 and book.take_changed() == {}


def test_book_bad_record_changes_nothing():
    book = _book()
    book.apply(key("g", "t", 0), value(3, 5, 100))
    with pytest.raises(CommitLogError):
        book.apply(key("g", "t", 0), b"\x00\x03\x00")
    assert book.get(("g", "t", 0)) == Commit(5, 100)


def test_commit_mode():
    assert commit_mode(True, None) == (True, "stream")
    assert commit_mode(False, None) == (False, "poll (reading __consumer_offsets)")
    assert commit_mode(True, "not authorized") == (False, "poll (not authorized)")
    assert commit_mode(False, "not authorized") == (False, "poll (not authorized)")
