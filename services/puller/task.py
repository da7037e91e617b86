"""One puller task: the source partitions that map to one staging partition.

The task owns staging partition ``s`` of ``_crossfeed.<feed>.changes`` and writes it
through a transactional producer whose transactional.id is fixed per task
(``crossfeed-puller.<feed>.<s>``): a new owner's ``init_transactions`` fences any
previous one, so a paused or partitioned instance can never write again.

Each transaction carries copied records, dead letters, and, last, one ResolvedMark per
source partition of the task with its ``next_offset``: the source positions are stored
on the target in the same transaction as the data (see crossfeed/positions.py), never on a source
cluster that may be gone.

Mirror feeds pack the copies per source partition into ``CopiedRecords`` packs
(crossfeed/wire/copied.py): key, value, headers and timestamp byte for byte, with what the
sink needs to add the provenance headers.

Ordered feeds (docs/ordered-feeds.md §2) write one staging record per source record: key,
value and timestamp byte for byte, the source headers with the provenance headers stamped
and ``crossfeed-commit-ts`` always present. Producer watermarks (``crossfeed-type:
resolved`` records on the source) are consumed, never copied: once a partition has shown
one, only its watermarks advance its resolved_ts (``crossfeed-resolved-from: watermarks``
on its marks carries that over to a new task owner); without them, the newest commit_ts
(or now, when caught up) minus ``lateness.ms``. The marks carry ``crossfeed-commit-ts:
<resolved_ts>``, and resolved_ts never goes backwards (a new owner starts from the
newest mark's). A data record at or below the partition's resolved_ts — emitted, or
promised by a watermark already read — would break that promise: it goes to the DLQ
(``LateChange``), as does one whose ``crossfeed-commit-ts`` or ``crossfeed-txn`` is
malformed or that would not fit the staging topic's ``max.message.bytes``.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from crossfeed.core import provenance
from crossfeed.core.partitions import TopicPartition
from crossfeed.core.timestamps import commit_ts_us, parse_commit_ts
from crossfeed.dlq import DeadLetter, FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.wire import codec, copied, headers, ids, topics
from crossfeed.wire.changes import parse_txn
from services.puller import metrics

log = logging.getLogger(__name__)

MARK_HEADERS = [headers.MARK_HEADER]
RESOLVED = headers.TYPE_RESOLVED.encode()
FROM_WATERMARKS = (headers.RESOLVED_FROM, headers.RESOLVED_FROM_WATERMARKS.encode())
# Bytes a record costs in a batch of its own beyond key, value and header bytes (v2 batch
# header 61 + record framing), and per header (varints): what the size check adds.
RECORD_OVERHEAD = 128
HEADER_OVERHEAD = 10
Bytes = bytes  # PartitionState counts bytes in a field called bytes
Header = tuple[str, bytes | None]
Staged = tuple[bytes | None, bytes | None, list[Header], int]
"""An ordered feed's staging record: key, value, headers, timestamp (ms, -1 none)."""


def staged_size(key: bytes | None, value: bytes | None, hdrs: list[Any]) -> int:
    """Upper bound of the bytes one staging record takes in a batch of its own."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for name, v in hdrs:
        size += HEADER_OVERHEAD + len(name) + len(v or b"")
    return size


def ordered_mark_headers(resolved_ts_us: int, watermarked: bool) -> list[Any]:
    """Headers of an ordered feed's resolved mark."""
    hdrs: list[Any] = [
        (headers.TYPE, RESOLVED),
        (headers.COMMIT_TS, str(resolved_ts_us).encode()),
    ]
    if watermarked:
        hdrs.append(FROM_WATERMARKS)
    return hdrs


def next_resolved(
    *,
    previous: int,
    watermarked: bool,
    watermark_us: int,
    newest_commit_ts_us: int,
    caught_up: bool,
    now_us: int,
    lateness_us: int,
) -> int:
    """An ordered feed's resolved_ts of a source partition at the end of a transaction:
    the producer's watermark when the partition follows them, else the newest commit_ts
    (or now, when caught up) minus the lateness; never below ``previous`` or 0."""
    if watermarked:
        candidate = watermark_us
    else:
        candidate = (now_us if caught_up else newest_commit_ts_us) - lateness_us
    return max(candidate, previous, 0)


class TaskFenced(RuntimeError):
    """Another instance owns this task now; this one must stop writing for it."""


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

    def reject_reason(self, msg: Any) -> str | None:
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


@dataclass
class PartitionState:
    tp: TopicPartition
    next_offset: int  # next source offset to copy (working, inside the open transaction)
    committed: int  # next_offset as of the last committed transaction
    pack: copied.Pack  # copies packed but not yet sent to the staging partition
    last_ts_us: int = 0  # commit_ts of the newest copied record
    resolved_ts_us: int = 0  # resolved_ts of the last committed mark
    pending_resolved_us: int = 0  # resolved_ts of the mark in the open transaction
    labels: tuple[str, str, str] = ("", "", "")
    key: bytes = b""  # staging key: the source topic-partition
    letters: list[tuple[Any, Any, Any]] = field(default_factory=list)  # dead letters to send
    sealed_offset: int = 0  # next_offset as of the commit under way
    records: int = 0  # copied since the metrics were last updated
    bytes: int = 0
    dead_letters: int = 0
    loop_dropped: int = 0
    # Ordered feeds.
    staged: list[Staged] = field(default_factory=list)  # staging records not yet sent
    staged_bytes: int = 0
    watermarked: bool = False  # the partition follows producer watermarks
    watermark_us: int = 0  # the newest producer watermark read (working)
    sealed_watermark: tuple[bool, int] = (False, 0)  # as of the commit under way
    committed_watermark: tuple[bool, int] = (False, 0)  # as of the last commit
    first_hop: list[Header] = field(default_factory=list)  # a first hop's provenance headers
    src: Bytes = b""  # crossfeed-src up to the offset: b"<cluster.id>/<topic>/<partition>/"

    def restore(self, resolved_ts_us: int, watermarked: bool) -> None:
        """Start from a previous owner's last mark: resolved_ts never goes backwards."""
        self.resolved_ts_us = self.pending_resolved_us = resolved_ts_us
        self.watermarked = watermarked
        self.watermark_us = resolved_ts_us if watermarked else 0
        self.committed_watermark = self.sealed_watermark = (watermarked, self.watermark_us)

    def floor_us(self) -> int:
        """Ordered feeds: a change at or below this commit_ts is late (its partition's
        resolved_ts, emitted or promised by a watermark already read)."""
        floor = max(self.resolved_ts_us, self.pending_resolved_us)
        return max(floor, self.watermark_us) if self.watermarked else floor


@dataclass
class PullerTask:
    """A task's transactions overlap with reading: :meth:`seal` ends one (copies and marks
    produced, on the reader's thread), :meth:`finish` commits it (on a committer thread,
    mostly waiting on the broker) and :meth:`committed` does the bookkeeping; meanwhile
    :meth:`add` keeps packing records into packs, which wait for the commit to finish
    before the next transaction sends them (``pending``)."""

    ctx: FeedContext
    staging_partition: int
    producer: Producer
    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    in_txn: bool = False
    txn_records: int = 0  # shipped in the open transaction
    txn_bytes: int = 0
    open_since: float | None = None  # when the oldest record not yet sealed arrived
    pending: Future[None] | None = None  # the sealed transaction's commit, under way
    pending_since: float | None = None  # when that commit was handed to its thread
    failures: int = 0  # transactions failed in a row
    last_commit: float = field(default_factory=time.monotonic)

    @property
    def transactional_id(self) -> str:
        return transactional_id(self.ctx.name, self.staging_partition)

    def add_partition(self, tp: TopicPartition, next_offset: int) -> PartitionState:
        state = PartitionState(
            tp,
            next_offset,
            next_offset,
            self._new_pack(tp),
            labels=(self.ctx.name, tp.topic, str(tp.partition)),
            key=str(tp).encode(),
            sealed_offset=next_offset,
        )
        source = self.ctx.source_cluster_id.encode()
        state.first_hop = [
            (headers.ORIGIN_CLUSTER, source),
            (headers.ORIGIN_TOPIC, tp.topic.encode()),
            (headers.HOPS, source),
        ]
        state.src = b"%s/%s/%d/" % (source, tp.topic.encode(), tp.partition)
        self.partitions[tp] = state
        return state

    def _new_pack(self, tp: TopicPartition) -> copied.Pack:
        return copied.Pack(self.ctx.source_cluster_id, tp.topic, tp.partition)

    # -- the hot path ---------------------------------------------------------------

    def add(self, msg: Any, state: PartitionState) -> None:
        """Copy one source record into the open transaction (or drop/dead-letter it).

        The copy keeps key, value, headers and timestamp as on the source; it joins the
        partition's pack, which goes to the staging partition once it holds
        ``pack_bytes`` (or at commit). ``state`` is the record's partition (the caller
        routes by topic and partition).
        """
        offset = msg.offset()
        if offset < state.next_offset:  # already copied (a re-fetch after a rewind)
            return
        if self.open_since is None:
            self.open_since = time.monotonic()
        if self.ctx.ordered:
            self._add_ordered(msg, state, offset)
            return
        hdrs = msg.headers()
        first_hop = True
        if hdrs is not None:
            if self._is_loop(hdrs, state):
                state.next_offset = offset + 1
                return
            if any(name in provenance.STAMPED for name, _ in hdrs):
                # All but crossfeed-src, which the sink appends from the pack.
                hdrs = self._stamp(hdrs, state, offset)[:-1]
                first_hop = False
        if self.ctx.filtering:
            reason = self.ctx.reject_reason(msg)
            if reason is not None:
                self._dead_letter(msg, "RejectedByFilter", reason, state)
                state.next_offset = offset + 1
                return
        ts_ms = msg.timestamp()[1]
        pack = state.pack
        pack.add(offset, ts_ms, msg.key(), msg.value(), hdrs, first_hop)
        state.next_offset = offset + 1
        if pack.size >= self.ctx.pack_bytes and self.pending is None:
            self._ship(state)

    def _add_ordered(self, msg: Any, state: PartitionState, offset: int) -> None:
        """An ordered feed's record: a producer watermark moves the partition's resolved_ts;
        a change becomes one staging record (docs/ordered-feeds.md §2)."""
        state.next_offset = offset + 1
        hdrs = msg.headers() or []
        # One pass over the headers for what matters here (the hot path).
        commit_values: list[bytes | None] = []
        txn_values: list[bytes | None] = []
        watermark = stamped_before = False
        for name, value in hdrs:
            if name.startswith(headers.PREFIX):
                if name == headers.COMMIT_TS:
                    commit_values.append(value)
                elif name == headers.TXN:
                    txn_values.append(value)
                elif name == headers.TYPE:
                    watermark = watermark or value == RESOLVED
                elif name in provenance.STAMPED:
                    stamped_before = True
        if stamped_before and self._is_loop(hdrs, state):
            return
        if watermark:
            try:
                ts = self._watermark_ts(hdrs, msg.value())
            except ValueError as err:
                self._dead_letter(msg, "BadWatermark", str(err), state)
                return
            state.watermarked = True
            state.watermark_us = max(state.watermark_us, ts)
            return
        if self.ctx.filtering:
            reason = self.ctx.reject_reason(msg)
            if reason is not None:
                self._dead_letter(msg, "RejectedByFilter", reason, state)
                return
        ts_ms = msg.timestamp()[1]
        try:
            commit_ts = _commit_ts(commit_values, hdrs, ts_ms)
            for value in txn_values:
                parse_txn(value)
        except ValueError as err:
            self._dead_letter(msg, "BadChangeHeaders", str(err), state)
            return
        floor = state.floor_us()
        if commit_ts <= floor:
            self._dead_letter(
                msg,
                "LateChange",
                f"commit_ts {commit_ts} is at or below the resolved_ts {floor} of "
                f"{state.tp} already promised (a producer watermark, or lateness.ms too low)",
                state,
            )
            return
        if stamped_before:
            stamped = self._stamp(hdrs, state, offset)
        else:  # what provenance.stamp gives a first hop, without parsing anything
            stamped = [*hdrs, *state.first_hop, (headers.SRC, b"%s%d" % (state.src, offset))]
        if not commit_values:
            stamped.append((headers.COMMIT_TS, b"%d" % commit_ts))
        key, value = msg.key(), msg.value()
        size = staged_size(key, value, stamped)
        if size > self.ctx.staging_max_bytes:
            self._dead_letter(
                msg,
                "RecordTooLarge",
                f"the staging record would take ~{size} bytes, more than the "
                f"max.message.bytes {self.ctx.staging_max_bytes} of {self.ctx.changes_topic}",
                state,
            )
            return
        state.staged.append((key, value, stamped, ts_ms))
        state.staged_bytes += size
        state.last_ts_us = max(state.last_ts_us, commit_ts)
        if state.staged_bytes >= self.ctx.pack_bytes and self.pending is None:
            self._ship(state)

    def _stamp(self, hdrs: list[Any], state: PartitionState, offset: int) -> list[Any]:
        """The record's headers with the provenance headers stamped (crossfeed-src last)."""
        return provenance.stamp(
            hdrs,
            source_cluster_id=self.ctx.source_cluster_id,
            source_topic=state.tp.topic,
            partition=state.tp.partition,
            offset=offset,
        )

    @staticmethod
    def _watermark_ts(hdrs: list[Any], value: bytes | None) -> int:
        """The resolved ts of a producer watermark: its crossfeed-commit-ts header, else
        its ResolvedMark value; ValueError if neither says."""
        found = [v for name, v in hdrs if name == headers.COMMIT_TS]
        if found:
            ts = parse_commit_ts(found[0])
            if any(parse_commit_ts(v) != ts for v in found[1:]):
                raise ValueError(f"watermark with conflicting {headers.COMMIT_TS} headers")
            return ts
        if not value:
            raise ValueError(f"watermark without {headers.COMMIT_TS} header or value")
        try:
            return int(codec.decode("ResolvedMark", value)["resolved_ts_us"])
        except codec.CodecError as err:
            raise ValueError(f"watermark value is not a ResolvedMark: {err}") from None

    def overfull(self) -> bool:
        """Packs have grown past four times pack_bytes while a commit is under way: the
        reader must wait for it (bounded memory)."""
        limit = 4 * self.ctx.pack_bytes
        return self.pending is not None and any(
            state.pack.size > limit or state.staged_bytes > limit
            for state in self.partitions.values()
        )

    def _ship(self, state: PartitionState) -> None:
        """Send the partition's dead letters and pack to the staging partition (inside the
        transaction); the counters are kept per pack, not per record. Never while a
        commit is under way: the producer's next transaction waits for it."""
        assert self.pending is None
        for key, value, hdrs in state.letters:
            self._begin()
            self.producer.produce(topics.DLQ, value=value, key=key, headers=hdrs)
            state.dead_letters += 1
        state.letters.clear()
        if state.staged:
            self._begin()
            for key, value, hdrs, ts_ms in state.staged:
                self._produce(self.ctx.changes_topic, value, key, hdrs, ts_ms)
            self.txn_records += len(state.staged)
            self.txn_bytes += state.staged_bytes
            state.records += len(state.staged)
            state.bytes += state.staged_bytes
            state.staged = []
            state.staged_bytes = 0
        pack = state.pack
        if not len(pack):
            return
        self._begin()
        self._produce(self.ctx.changes_topic, pack.encode(), state.key, None)
        state.pack = self._new_pack(state.tp)
        self.txn_records += len(pack)
        self.txn_bytes += pack.size
        state.records += len(pack)
        state.bytes += pack.size
        if not self.ctx.ordered:
            state.last_ts_us = max(pack.timestamps[-1], 0) * 1000

    def _open_records(self) -> tuple[int, int]:
        """Records and bytes in the open transaction, shipped or not."""
        states = self.partitions.values()
        return (
            self.txn_records + sum(len(s.pack) + len(s.staged) for s in states),
            self.txn_bytes + sum(s.pack.size + s.staged_bytes for s in states),
        )

    def _is_loop(self, hdrs: list[Any], state: PartitionState) -> bool:
        """True (and counted) when the target cluster is already in the hop list."""
        try:
            copy = provenance.should_copy(hdrs, self.ctx.target_cluster_id)
        except ValueError:  # unreadable provenance: copy it; the hop list is not ours
            return False
        if not copy:
            state.loop_dropped += 1
        return not copy

    def _dead_letter(self, msg: Any, error_class: str, reason: str, state: PartitionState) -> None:
        letter = DeadLetter(
            feed=self.ctx.name,
            cluster_id=self.ctx.source_cluster_id,
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            stage="puller",
            error_class=error_class,
            error_message=reason,
        )
        if self.ctx.feed.config.errors_tolerance == "none":
            raise FeedStopped(letter)
        log.warning("dead letter: %s", letter.describe())
        # Sent with the partition's pack (_ship): a commit may be under way.
        state.letters.append((msg.key(), msg.value(), letter.headers(msg.headers() or [])))

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        hdrs: list[Any] | None,
        timestamp_ms: int = -1,
    ) -> None:
        kwargs: dict[str, Any] = {}
        if timestamp_ms >= 0:
            kwargs["timestamp"] = timestamp_ms
        clients.produce_waiting(
            self.producer,
            topic,
            value=value,
            key=key,
            partition=self.staging_partition,
            headers=hdrs,
            **kwargs,
        )

    def _begin(self) -> None:
        if not self.in_txn:
            self._txn(self.producer.begin_transaction)
            self.in_txn = True

    # -- transactions ---------------------------------------------------------------

    def due(self, now: float, interval_s: float) -> bool:
        """Time to seal? ``interval_s``: how long a transaction may stay open now (the
        worker's choice: short while keeping up, longer while catching up a backlog)."""
        if self.pending is not None:
            return False  # one commit at a time
        age_left = self.due_in(now, interval_s)
        if age_left is not None:
            records, size = self._open_records()
            return (
                records >= self.ctx.max_batch_records
                or size >= self.ctx.max_batch_bytes
                or age_left <= 0
            )
        # Idle: still emit resolved marks so resolved_ts advances (docs/design.md, Puller).
        return bool(self.partitions) and now - self.last_commit >= self.ctx.resolved_interval_s

    def due_in(self, now: float, interval_s: float) -> float | None:
        """Seconds until the open transaction is due by age (None: none open, or a commit
        is still under way)."""
        if self.pending is not None or self.open_since is None:
            return None
        return self.open_since + interval_s - now

    def commit(self, positions: dict[TopicPartition, int], caught_up: set[TopicPartition]) -> None:
        """Seal and commit now, on this thread; raises TaskFenced if fenced."""
        self.seal(positions, caught_up)
        self.finish()
        self.committed()

    def seal(self, positions: dict[TopicPartition, int], caught_up: set[TopicPartition]) -> None:
        """End the open transaction: its copies, then a mark per partition. Records added
        from now on belong to the next one.

        ``positions`` are the reader's fetch positions (past skipped aborted records and
        transaction markers); ``caught_up`` the partitions with no backlog, whose
        resolved_ts may advance to now.
        """
        assert self.pending is None
        self._begin()
        for state in self.partitions.values():
            self._ship(state)  # the copies first: a mark covers what precedes it
        now_us = int(time.time() * 1_000_000)
        lateness_us = self.ctx.feed.config.lateness_ms * 1000
        ordered = self.ctx.ordered
        for tp, state in self.partitions.items():
            state.next_offset = max(state.next_offset, positions.get(tp, -1))
            state.sealed_offset = state.next_offset
            if ordered:
                resolved = next_resolved(
                    previous=state.resolved_ts_us,
                    watermarked=state.watermarked,
                    watermark_us=state.watermark_us,
                    newest_commit_ts_us=state.last_ts_us,
                    caught_up=tp in caught_up,
                    now_us=now_us,
                    lateness_us=lateness_us,
                )
                mark_headers = ordered_mark_headers(resolved, state.watermarked)
                state.sealed_watermark = (state.watermarked, state.watermark_us)
            else:
                resolved = max(
                    (now_us if tp in caught_up else state.last_ts_us) - lateness_us,
                    state.resolved_ts_us,  # resolved_ts never goes backwards
                )
                mark_headers = MARK_HEADERS
            mark = {
                "source_cluster": self.ctx.source_cluster_id,
                "topic": tp.topic,
                "partition": tp.partition,
                "resolved_ts_us": max(resolved, 0),
                "next_offset": state.next_offset,
            }
            self._produce(
                self.ctx.changes_topic, codec.encode("ResolvedMark", mark), state.key, mark_headers
            )
            state.pending_resolved_us = max(resolved, 0)
            metrics.RESOLVED_TS.labels(*state.labels).set(max(resolved, 0) / 1e6)
        self.open_since = None

    def finish(self) -> None:
        """Commit the sealed transaction (any thread); raises TaskFenced if fenced."""
        self._txn(self.producer.commit_transaction, 60)

    def committed(self) -> None:
        """Bookkeeping once the sealed transaction is committed (the reader's thread)."""
        for state in self.partitions.values():
            if state.records:
                metrics.RECORDS.labels(*state.labels).inc(state.records)
                metrics.BYTES.labels(*state.labels).inc(state.bytes)
            if state.dead_letters:
                metrics.DLQ.labels(*state.labels).inc(state.dead_letters)
            if state.loop_dropped:
                metrics.LOOP_DROPPED.labels(*state.labels).inc(state.loop_dropped)
            state.records = state.bytes = state.dead_letters = state.loop_dropped = 0
            state.committed = state.sealed_offset
            state.resolved_ts_us = state.pending_resolved_us
            state.committed_watermark = state.sealed_watermark
        self.in_txn = False
        self.txn_records = self.txn_bytes = 0
        self.failures = 0
        self.last_commit = time.monotonic()
        metrics.TRANSACTIONS.labels(self.ctx.name).inc()

    def abort(self) -> dict[TopicPartition, int]:
        """Abort the open (or failed sealed) transaction and drop what was read since;
        returns where the reader must rewind to."""
        self.pending = self.pending_since = None
        self.open_since = None
        if self.in_txn:
            try:
                self.producer.abort_transaction(30)
            except KafkaException as err:
                log.warning("task %s: abort failed: %s", self.staging_partition, err)
            self.in_txn = False
            self.txn_records = self.txn_bytes = 0
        for state in self.partitions.values():
            state.next_offset = state.committed
            state.pack = self._new_pack(state.tp)
            state.letters.clear()
            state.records = state.bytes = state.dead_letters = state.loop_dropped = 0
            state.staged = []
            state.staged_bytes = 0
            state.pending_resolved_us = state.resolved_ts_us
            state.watermarked, state.watermark_us = state.committed_watermark
        return {tp: state.committed for tp, state in self.partitions.items()}

    def _txn(self, call: Any, *args: Any) -> None:
        """Run a transactional call; retriable errors are retried, fencing is raised."""
        for _attempt in range(5):
            try:
                call(*args)
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if clients.is_fenced(err):
                    raise TaskFenced(
                        f"task {self.transactional_id} fenced: another instance owns it "
                        f"({err.str()})"
                    ) from None
                if err.retriable():
                    time.sleep(0.2)
                    continue
                raise
        call(*args)

    def close(self) -> None:
        try:
            self.producer.flush(5)
        except KafkaException as err:  # a fenced producer has nothing left to deliver
            log.info("task %d: producer closed (%s)", self.staging_partition, err)


def _commit_ts(values: list[bytes | None], hdrs: list[Any], ts_ms: int) -> int:
    """commit_ts_us for the values of the record's crossfeed-commit-ts headers, with a fast
    path for the usual one well-formed value."""
    if len(values) == 1:
        value = values[0]
        if value is not None and value.isdigit() and len(value) < 19:
            return int(value)
    return commit_ts_us(hdrs, ts_ms)


def transactional_id(feed: str, staging_partition: int) -> str:
    return ids.puller_transactional_id(feed, staging_partition)
