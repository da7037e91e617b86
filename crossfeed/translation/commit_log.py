"""Group commits as the source cluster logs them in ``__consumer_offsets`` (no I/O).

Every offset a consumer group commits is appended by the group coordinator to the
compacted internal topic ``__consumer_offsets``. Following that topic gives the
translator each commit within milliseconds, for every group at once, instead of one
admin request per group per round.

The record formats are Kafka's own (the ``OffsetCommitKey`` / ``OffsetCommitValue``
message schemas of the broker's group coordinator), in Kafka's big-endian protocol
encoding:

Key: ``int16 record type`` then the fields of that type.

* type 0 and 1 — an offset commit: ``string group``, ``string topic``, ``int32
  partition`` (type 0 is what brokers before 2.x wrote; the fields are the same);
* type 2 — group metadata (members, generation): not a commit, ignored;
* type 3 and up — the records of the newer group protocols (KIP-848 consumer groups,
  share and streams groups): not commits either, ignored. Offsets of those groups are
  still logged under type 1.

Value of an offset commit: ``int16 version`` then

* v0, v2: ``int64 offset``, ``string metadata``, ``int64 commit timestamp``;
* v1: the same followed by ``int64 expire timestamp``;
* v3: ``int64 offset``, ``int32 leader epoch``, ``string metadata``, ``int64 commit
  timestamp``;
* v4 (flexible): as v3 but ``metadata`` is a compact string (unsigned varint length + 1)
  and tagged fields follow (tag 0: the topic's 16-byte id; unknown tags are skipped, as
  Kafka adds fields only as tags from v4 on).

A null value (a tombstone) means the group's offset for that partition was deleted
(group deleted, offsets expired, or removed by an admin).

A ``string`` is ``int16 length`` + UTF-8 bytes. Anything that does not parse raises
:class:`CommitLogError` (a ``ValueError``) naming what is wrong, never another
exception: the follower skips such a record and says so.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

TOPIC: Final = "__consumer_offsets"
OFFSET_COMMIT_TYPES: Final = (0, 1)
GROUP_METADATA_TYPE: Final = 2
MAX_VALUE_VERSION: Final = 4
TOPIC_ID_TAG: Final = 0

Where = tuple[str, str, int]
"""(group, topic, partition)."""


class CommitLogError(ValueError):
    """A ``__consumer_offsets`` record that is not in a format this module knows."""


@dataclass(frozen=True, slots=True)
class CommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class CommitValue:
    offset: int
    """The next record the group reads."""
    commit_timestamp_ms: int
    """When the coordinator accepted the commit (broker clock)."""
    leader_epoch: int = -1
    metadata: str = ""
    expire_timestamp_ms: int = -1
    topic_id: bytes | None = None


class _Reader:
    """Big-endian reads over one record, every short read a CommitLogError."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def _take(self, n: int, field: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CommitLogError(
                f"{self.what}: {field} needs {n} bytes at byte {self.pos}, "
                f"the record has {len(self.data)}"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self, field: str) -> int:
        return int(struct.unpack(">h", self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(struct.unpack(">i", self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(struct.unpack(">q", self._take(8, field))[0])

    def uvarint(self, field: str) -> int:
        value = shift = 0
        while True:
            byte = self._take(1, field)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:  # Kafka's unsigned varints are 32-bit: at most 5 bytes
                raise CommitLogError(f"{self.what}: {field} is a varint longer than 5 bytes")

    def _text(self, raw: bytes, field: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CommitLogError(f"{self.what}: {field} is not UTF-8 ({err})") from None

    def string(self, field: str) -> str:
        length = self.int16(f"{field} length")
        if length < 0:
            raise CommitLogError(f"{self.what}: {field} is null (length {length})")
        return self._text(self._take(length, field), field)

    def compact_string(self, field: str) -> str:
        length = self.uvarint(f"{field} length") - 1
        if length < 0:
            raise CommitLogError(f"{self.what}: {field} is null")
        return self._text(self._take(length, field), field)

    def tagged_fields(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint("tagged field count")):
            tag = self.uvarint("tag")
            out[tag] = self._take(self.uvarint(f"size of tag {tag}"), f"tag {tag}")
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise CommitLogError(
                f"{self.what}: {len(self.data) - self.pos} unexpected bytes after byte {self.pos}"
            )


def parse_key(data: bytes) -> CommitKey | None:
    """The commit a key names, or None for a record that is not an offset commit."""
    reader = _Reader(bytes(data), "__consumer_offsets key")
    kind = reader.int16("record type")
    if kind < 0:
        raise CommitLogError(f"__consumer_offsets key: negative record type {kind}")
    if kind not in OFFSET_COMMIT_TYPES:
        return None
    key = CommitKey(reader.string("group"), reader.string("topic"), reader.int32("partition"))
    reader.end()
    return key


def parse_value(data: bytes) -> CommitValue:
    """An offset commit's value (versions 0 to 4)."""
    reader = _Reader(bytes(data), "__consumer_offsets value")
    version = reader.int16("version")
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise CommitLogError(
            f"__consumer_offsets value: version {version} is not one of the known "
            f"0-{MAX_VALUE_VERSION} (a newer broker? its format is not documented here)"
        )
    offset = reader.int64("offset")
    epoch = reader.int32("leader epoch") if version >= 3 else -1
    metadata = reader.compact_string("metadata") if version >= 4 else reader.string("metadata")
    committed = reader.int64("commit timestamp")
    expire = reader.int64("expire timestamp") if version == 1 else -1
    topic_id = None
    if version >= 4:
        topic_id = reader.tagged_fields().get(TOPIC_ID_TAG)
        if topic_id is not None and len(topic_id) != 16:
            raise CommitLogError(
                f"__consumer_offsets value: topic id of {len(topic_id)} bytes, not 16"
            )
    reader.end()
    return CommitValue(offset, committed, epoch, metadata, expire, topic_id)


@dataclass(frozen=True, slots=True)
class Commit:
    """A group's latest commit on one partition, as the translator keeps it."""

    offset: int
    committed_at_ms: int


class CommitBook:
    """The latest commit per (group, topic, partition) of the groups and topics wanted.

    Fed record by record (:meth:`apply`, keys as raw bytes); remembers which entries
    changed since :meth:`take_changed` was last called, so the owner translates only
    those. Not thread-safe: the follower's lock serialises access.
    """

    def __init__(
        self, wanted_group: Callable[[str], bool], wanted_topic: Callable[[str], bool]
    ) -> None:
        self.wanted_group = wanted_group
        self.wanted_topic = wanted_topic
        self._latest: dict[Where, Commit] = {}
        self._changed: set[Where] = set()

    def __len__(self) -> int:
        return len(self._latest)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Fold one record of ``__consumer_offsets`` (raises CommitLogError for one that
        does not parse; nothing is changed then)."""
        parsed = parse_key(key)
        if parsed is None:
            return
        where = (parsed.group, parsed.topic, parsed.partition)
        if not (self.wanted_group(parsed.group) and self.wanted_topic(parsed.topic)):
            return
        commit = parse_value(value) if value is not None else None
        if commit is None or commit.offset < 0:
            # Deleted (or a commit of "no position", which a group can make): the group
            # has no position there any more, so it must not be translated from an old one.
            if self._latest.pop(where, None) is not None:
                self._changed.add(where)
            return
        self._latest[where] = Commit(commit.offset, commit.commit_timestamp_ms)
        self._changed.add(where)

    def get(self, where: Where) -> Commit | None:
        return self._latest.get(where)

    def items(self) -> list[tuple[Where, Commit]]:
        return list(self._latest.items())

    def take_changed(self) -> dict[Where, Commit | None]:
        """Entries changed since the last call, with their commit now (None: deleted)."""
        changed = {where: self._latest.get(where) for where in sorted(self._changed)}
        self._changed.clear()
        return changed


def commit_mode(caught_up: bool, problem: str | None) -> tuple[bool, str]:
    """Whether translation follows commits as a stream, and how ``crossfeed status`` says
    so: the stream is used once everything ``__consumer_offsets`` held was read and while
    it can be read; otherwise the translator lists group offsets every round (poll)."""
    if caught_up and problem is None:
        return True, "stream"
    return False, f"poll ({problem or 'reading __consumer_offsets'})"
