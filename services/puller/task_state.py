"""What a task knows of its feed (FeedContext, shared by every task of the feed on one
instance) and of each of its source partitions (PartitionState): the data that the
task's pieces — ordered.py, marks.py, letters.py — work on."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from crossfeed.cdc.schema_copy import SchemaFollower
from crossfeed.core import provenance
from crossfeed.core.gaps import Gap
from crossfeed.core.partitions import TopicPartition
from crossfeed.core.task_txn import Limits
from crossfeed.feeds import FeedSpec
from crossfeed.kafka.protocols import Message
from crossfeed.services.puller.copies import Copy, Route
from crossfeed.wire.debezium import EnvelopeSplitter

Header = tuple[str, bytes | None]
Staged = tuple[bytes | None, bytes | None, list[Header], int]
"""An ordered feed's staging record: key, value, headers, timestamp (ms, -1 none)."""


@dataclass
class SchemaRefs:
    """A partition's Connect schemas by reference (Debezium input). ``sent``: schemas this
    task has written or will write in its open transaction; a failed transaction ends the
    task, and its successor starts with none (a schema written twice is compacted away)."""

    splitter: EnvelopeSplitter = field(default_factory=EnvelopeSplitter)
    sent: set[bytes] = field(default_factory=set)
    unsent: list[tuple[bytes, bytes]] = field(default_factory=list)  # (id, schema) to write

    def take(self, value: bytes | None) -> tuple[bytes, bytes] | None:
        """(schema id, payload) of a JSON-converter value, the schema queued for writing
        unless sent; None for a value of any other form (it travels whole)."""
        split = self.splitter.split(value)
        if split is None:
            return None
        sid, schema, payload = split
        if sid not in self.sent:
            self.sent.add(sid)
            self.unsent.append((sid, schema))
        return sid, payload


@dataclass(frozen=True)
class FeedContext:
    """What every task of one feed on one instance shares."""

    feed: FeedSpec
    source_cluster_id: str
    target_cluster_id: str
    changes_topic: str
    max_batch_records: int
    max_batch_bytes: int
    pack_bytes: int
    commit_interval_s: float
    backlog_commit_interval_s: float
    resolved_interval_s: float
    staging_max_bytes: int = 64 << 20  # the staging topic's max.message.bytes
    schemas_topic: str | None = None  # Debezium input: where the Connect schemas go
    # mirror feeds with schema.registry.target_url: the schemas follow the records
    follower: SchemaFollower | None = None

    @property
    def name(self) -> str:
        return self.feed.name

    @functools.cached_property
    def filtering(self) -> bool:
        opts = self.feed.config
        return bool(opts.filter_reject_header or opts.filter_reject_key_regex)

    @functools.cached_property
    def ordered(self) -> bool:
        return self.feed.mode == "ordered"

    @functools.cached_property
    def limits(self) -> Limits:
        return Limits(self.max_batch_records, self.max_batch_bytes, self.resolved_interval_s)

    def reject_reason(self, msg: Message) -> str | None:
        """Why a configured filter rejects this record, or None."""
        opts = self.feed.config
        if opts.filter_reject_header and any(
            k == opts.filter_reject_header for k, _ in (msg.headers() or [])
        ):
            return f"record carries header {opts.filter_reject_header!r} (filter.reject.header)"
        if opts.filter_reject_key_regex is not None:
            key = msg.key()
            if key is not None and re.fullmatch(
                opts.filter_reject_key_regex, key.decode("utf-8", "replace")
            ):
                return f"key matches {opts.filter_reject_key_regex!r} (filter.reject.key.regex)"
        return None


@dataclass(eq=False)
class PartitionState:
    """One source partition of a task: what waits to be sent, and its timestamps. Compared
    and hashed by identity: it keys the task's positions (TaskTxn), looked up per record."""

    tp: TopicPartition
    stamper: provenance.Stamper  # the provenance header of its copies
    route: Route | None = None  # mirror feeds: where the copies go
    copies: list[Copy] = field(default_factory=list)  # mirror copies not yet sent
    copies_bytes: int = 0
    max_copy: int = 0  # largest key + value among them (is a size check needed?)
    last_ts_us: int = 0  # commit_ts of the newest copied record
    resolved_ts_us: int = 0  # resolved_ts of the last committed mark
    pending_resolved_us: int = 0  # resolved_ts of the mark in the open transaction
    labels: tuple[str, str, str] = ("", "", "")
    key: bytes = b""  # the marks' key: the source topic-partition
    letters: list[tuple[Any, Any, Any]] = field(default_factory=list)  # dead letters to send
    records: int = 0  # sent since the metrics were last updated
    bytes: int = 0
    dead_letters: int = 0
    loop_dropped: int = 0
    # Ordered feeds.
    staged: list[Staged] = field(default_factory=list)  # staging records not yet sent
    staged_bytes: int = 0
    watermarked: bool = False  # the partition follows producer watermarks
    # Gaps reported and not acknowledged, carried in every mark (core/gaps.py, D).
    gaps: tuple[Gap, ...] = ()
    watermark_us: int = 0  # the newest producer watermark read (working)
    schemas: SchemaRefs | None = None  # Debezium input: schemas by reference

    def restore(self, resolved_ts_us: int, watermarked: bool) -> None:
        """Start from a previous owner's last mark: resolved_ts never goes backwards."""
        self.resolved_ts_us = self.pending_resolved_us = resolved_ts_us
        self.watermarked = watermarked
        self.watermark_us = resolved_ts_us if watermarked else 0

    def floor_us(self) -> int:
        """Ordered feeds: a change at or below this commit_ts is late (its partition's
        resolved_ts, emitted or promised by a watermark already read)."""
        # watermark_us: the newest watermark read (0 until one is, and for a new owner of
        # a partition that follows the clock): a final one binds too.
        return max(self.resolved_ts_us, self.pending_resolved_us, self.watermark_us)

    def is_loop(self, hdrs: list[Any], target_cluster_id: str) -> bool:
        """True (and counted) when the target cluster is already in the hop list."""
        try:
            copy = provenance.should_copy(hdrs, target_cluster_id)
        except ValueError:  # unreadable provenance: copy it; the hop list is not ours
            return False
        if not copy:
            self.loop_dropped += 1
        return not copy
