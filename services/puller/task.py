"""One puller task: a fixed set of source partitions, one transaction at a time.

A task is numbered like the partition ``s`` of ``_crossfeed.<feed>.changes`` that holds its
positions; the source partitions that hash to ``s`` are its own. It writes through one
transactional producer on the target whose transactional.id is fixed per task
(``crossfeed-puller.<feed>.<s>``): a new owner's ``init_transactions`` fences any previous
one, so a paused or partitioned instance can never write again.

Each transaction holds, together:

* **mirror feeds**: the copies, straight into their target topics (the same partition
  number; key, value, headers and timestamp as on the source, the provenance
  header appended — services/puller/copies.py) and the ``OffsetSync`` ranges of those copies,
  taken from the delivery reports just before the commit;
* **ordered feeds**: one staging record per change in partition ``s`` (ordered.py);
* the dead letters;
* last, one ``ResolvedMark`` per source partition in partition ``s``, with ``next_offset``:
  the positions commit with the data, on the target, never on a source cluster that may
  be gone (crossfeed/positions.py reads them back for the next owner).

The decisions — which records to take, when to commit, what the marks say, what to do
after a failure — are crossfeed/core/task_txn.py's; this module does the I/O.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from crossfeed.cdc.schema_copy import SchemaFollower
from crossfeed.core import provenance
from crossfeed.core.gaps import Gap, carry
from crossfeed.core.partitions import TopicPartition
from crossfeed.core.task_txn import Decision, Limits, Outcome, Phase, TaskTxn
from crossfeed.dlq import GAP_END, DeadLetter, FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka.protocols import Message, TransactionalProducer
from crossfeed.kafka.targets import record_size
from crossfeed.services.puller import metrics, ordered
from crossfeed.services.puller.copies import Copy, CopyProblem, Route
from crossfeed.wire import confluent_avro, headers, ids, records, topics

log = logging.getLogger(__name__)

MARK_HEADERS = [headers.MARK_HEADER]
COPY_OVERHEAD = 64  # bytes a buffered copy costs beyond key and value (headers, tuple)
GAP_ERROR_CLASS = "SourceRecordsDeleted"  # a gap's dead letter (core/gaps.py)
SIZE_SLACK = 64 << 10  # below max.message.bytes by this much, no exact size check is needed


@dataclass(frozen=True)
class TxnFailure:
    """Why the task's transaction did not commit. The commit path (:meth:`PullerTask.seal`,
    :meth:`PullerTask.finish`) returns it rather than raising: librdkafka's exceptions
    are turned into this value where they are caught, and the worker decides what
    next from it (:meth:`PullerTask.failed`)."""

    outcome: Outcome  # FENCED (another instance owns the task) or FAILED
    detail: str

    @classmethod
    def of(cls, err: BaseException) -> TxnFailure:
        """An exception from outside the commit path (a send that failed)."""
        if isinstance(err, KafkaException):
            kafka_err: KafkaError = err.args[0]
            fenced = clients.is_fenced(kafka_err)
            return cls(Outcome.FENCED if fenced else Outcome.FAILED, kafka_err.str())
        return cls(Outcome.FAILED, str(err))


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
    staged: list[ordered.Staged] = field(default_factory=list)  # staging records not yet sent
    staged_bytes: int = 0
    watermarked: bool = False  # the partition follows producer watermarks
    # Gaps reported and not acknowledged, carried in every mark (core/gaps.py, D).
    gaps: tuple[Gap, ...] = ()
    watermark_us: int = 0  # the newest producer watermark read (working)
    schemas: ordered.SchemaRefs | None = None  # Debezium input: schemas by reference

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


@dataclass
class PullerTask:
    """A task's transactions overlap with reading: :meth:`seal` ends one (copies and marks
    sent, on the reader's thread), :meth:`finish` commits it (on a committer thread,
    mostly waiting on the broker) and :meth:`committed` does the bookkeeping; meanwhile
    :meth:`add` keeps taking records, which are held until the commit is settled
    (``pending``) and then sent in the next transaction."""

    ctx: FeedContext
    staging_partition: int
    producer: TransactionalProducer
    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    txn: TaskTxn[PartitionState] = field(init=False)
    in_txn: bool = False  # the producer's transaction has begun
    pending: Future[TxnFailure | None] | None = None  # the sealed transaction's commit, under way
    pending_since: float | None = None  # when that commit was handed to its thread
    # registry ids the copies not yet sealed name (ctx.follower): in the target registry
    # before their transaction commits
    schema_ids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.txn = TaskTxn(self.ctx.limits, last_commit=time.monotonic())

    @property
    def transactional_id(self) -> str:
        return transactional_id(self.ctx.name, self.staging_partition)

    def add_partition(
        self, tp: TopicPartition, next_offset: int, route: Route | None = None
    ) -> PartitionState:
        state = PartitionState(
            tp,
            provenance.Stamper(self.ctx.source_cluster_id, tp.topic, tp.partition),
            route,
            labels=(self.ctx.name, tp.topic, str(tp.partition)),
            key=records.mark_key(tp.topic, tp.partition),
            schemas=None if self.ctx.schemas_topic is None else ordered.SchemaRefs(),
        )
        self.txn.add_partition(state, next_offset)
        self.partitions[tp] = state
        return state

    def position(self, tp: TopicPartition) -> int:
        """The next source offset to take in ``tp``."""
        return self.txn.next[self.partitions[tp]]

    # -- the hot path ---------------------------------------------------------------

    def add(self, msg: Message, state: PartitionState, now: float | None = None) -> None:
        """Take one source record into the open transaction (or drop/dead-letter it).

        A mirror copy keeps key, value, headers and timestamp as on the source, with the
        provenance header appended; it waits in its partition's buffer, which is sent
        once it holds ``pack_bytes`` (or at commit). ``state`` is the record's partition
        (the caller routes by topic and partition); ``now`` the caller's clock reading.
        """
        offset = msg.offset()
        key, value = msg.key(), msg.value()
        size = (len(key) if key else 0) + (len(value) if value else 0)
        if not self.txn.take(state, offset, size, time.monotonic() if now is None else now):
            return  # already taken (a re-fetch)
        if self.ctx.ordered:
            refused = ordered.add(self.ctx, state, msg, offset)
            if refused is not None:
                self.dead_letter(msg, *refused, state)
            return
        stamper = state.stamper
        hdrs = msg.headers()
        if hdrs is None:  # the usual first hop: no parsing at all
            stamped = stamper.first_hop((), offset)
        else:
            if state.is_loop(hdrs, self.ctx.target_cluster_id):
                return
            if any(name in provenance.STAMPED for name, _ in hdrs):
                try:
                    stamped = stamper.stamp(hdrs, offset)
                except ValueError as err:  # a provenance header that is not UTF-8
                    self.dead_letter(msg, "BadProvenance", str(err), state)
                    return
            else:
                stamped = stamper.first_hop(hdrs, offset)
        if self.ctx.filtering:
            reason = self.ctx.reject_reason(msg)
            if reason is not None:
                self.dead_letter(msg, "RejectedByFilter", reason, state)
                return
        if self.ctx.follower is not None:
            for raw in (value, key):
                sid = confluent_avro.schema_id(raw)
                if sid is not None:
                    self.schema_ids.add(sid)
        state.copies.append((offset, msg.timestamp()[1], key, value, stamped))
        state.copies_bytes += size + COPY_OVERHEAD
        if size > state.max_copy:
            state.max_copy = size

    def send(self) -> TxnFailure | None:
        """Send what the partitions hold into the open transaction now, unless a commit
        is under way (the reader calls it after each read, so :meth:`add` only buffers):
        copies go out as they are read, and the commit finds them delivered instead of
        waiting for them. A failure is returned; the task must then end."""
        if self.pending is not None or not self.txn.may_send():
            return None
        for state in self.partitions.values():
            if state.copies or state.staged or state.letters:
                failure = self._ship(state)
                if failure is not None:
                    return failure
        return None

    def overfull(self) -> bool:
        """Records held during a commit have grown past four times pack_bytes in one
        partition: the reader must wait for the commit (bounded memory)."""
        limit = 4 * self.ctx.pack_bytes
        return self.pending is not None and any(
            state.copies_bytes > limit or state.staged_bytes > limit
            for state in self.partitions.values()
        )

    def _ship(self, state: PartitionState) -> TxnFailure | None:
        """Send the partition's dead letters and records (inside the transaction); the
        counters are kept per send, not per record. Never while a commit is under way:
        the producer's next transaction waits for it."""
        assert self.pending is None and self.txn.may_send()
        failure = self._begin()
        if failure is not None:
            return failure
        try:
            if state.letters:
                for key, value, hdrs in state.letters:
                    self._produce(topics.DLQ, value, key, hdrs, partition=-1)
                    state.dead_letters += 1
                state.letters.clear()
            schemas = state.schemas
            if schemas is not None and schemas.unsent:
                # Before the changes that refer to them, in the same transaction.
                assert self.ctx.schemas_topic is not None
                for sid, schema in schemas.unsent:
                    self._produce(self.ctx.schemas_topic, schema, sid, None, partition=0)
                schemas.unsent.clear()
            if state.staged:
                # By position, like the copies (keywords cost ~2 µs per record here).
                topic, partition, producer = (
                    self.ctx.changes_topic,
                    self.staging_partition,
                    self.producer,
                )
                for key, value, hdrs, ts_ms in state.staged:
                    # A record without a timestamp (-1) is staged at the time of writing (0).
                    clients.produce_copy(
                        producer, topic, value, key, partition, None, max(ts_ms, 0), hdrs
                    )
                state.records += len(state.staged)
                state.bytes += state.staged_bytes
                state.staged = []
                state.staged_bytes = 0
            if state.copies:
                self._write_copies(state)
        except KafkaException as err:  # librdkafka refused a record (a fenced producer)
            return TxnFailure.of(err)
        return None

    def _write_copies(self, state: PartitionState) -> None:
        """A mirror partition's buffered copies into its target partition."""
        route = state.route
        assert route is not None
        copies, state.copies = state.copies, []
        buffered, state.copies_bytes = state.copies_bytes, 0
        written = size_total = 0
        if route.exact or state.max_copy + SIZE_SLACK > route.max_message_bytes:
            # Copy by copy: each size-checked, in a block of its own.
            for copy in copies:
                offset, _, key, value, hdrs = copy
                exact = record_size(key, value, hdrs)
                if exact > route.max_message_bytes:
                    self._letter(
                        key,
                        value,
                        hdrs,
                        offset,
                        "RecordTooLarge",
                        f"record of {exact} bytes exceeds max.message.bytes="
                        f"{route.max_message_bytes} of target topic {route.target_topic}",
                        state,
                    )
                    continue
                route.write_one(self.producer, copy)
                written += 1
                size_total += (len(key) if key else 0) + (len(value) if value else 0)
            for letter_key, letter_value, letter_hdrs in state.letters:
                self._produce(topics.DLQ, letter_value, letter_key, letter_hdrs, partition=-1)
                state.dead_letters += 1
            state.letters.clear()
        else:
            route.write(self.producer, copies)
            written = len(copies)
            size_total = buffered - COPY_OVERHEAD * written
        state.max_copy = 0
        state.records += written
        state.bytes += size_total
        state.last_ts_us = max(copies[-1][1], 0) * 1000

    def dead_letter(
        self, msg: Message, error_class: str, reason: str, state: PartitionState
    ) -> None:
        """A source record that is not copied, kept in ``_crossfeed.dlq`` with why."""
        self._letter(
            msg.key(), msg.value(), msg.headers() or [], msg.offset(), error_class, reason, state
        )

    def _letter(
        self,
        key: bytes | None,
        value: bytes | None,
        hdrs: list[Any],
        offset: int,
        error_class: str,
        reason: str,
        state: PartitionState,
    ) -> None:
        letter = DeadLetter(
            feed=self.ctx.name,
            cluster_id=self.ctx.source_cluster_id,
            topic=state.tp.topic,
            partition=state.tp.partition,
            offset=offset,
            stage="puller",
            error_class=error_class,
            error_message=reason,
        )
        if self.ctx.feed.config.errors_tolerance == "none":
            raise FeedStopped(letter)
        log.warning("dead letter: %s", letter.describe())
        # Sent with the partition's records (_ship): a commit may be under way.
        state.letters.append((key, value, letter.headers(hdrs)))

    def gap_letter(self, state: PartitionState, gap: Gap) -> None:
        """The records of ``gap`` will never be copied (deleted at the source): a dead
        letter without key or value says so in the target, sent in the transaction whose
        mark moves the partition past the gap (both go with the next one when a commit
        is under way)."""
        letter = DeadLetter(
            feed=self.ctx.name,
            cluster_id=self.ctx.source_cluster_id,
            topic=state.tp.topic,
            partition=state.tp.partition,
            offset=gap.first,
            stage="puller",
            error_class=GAP_ERROR_CLASS,
            error_message=f"offsets {gap.first}-{gap.last} ({gap.count} records) were deleted "
            "at the source before they were copied",
        )
        state.letters.append((None, None, letter.headers([(GAP_END, str(gap.end).encode())])))
        self.txn.skip_to(state, gap.end)

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        hdrs: list[Any] | None,
        timestamp_ms: int = -1,
        partition: int | None = None,
    ) -> None:
        """One of crossfeed's own records (staging, mark, sync, dead letter)."""
        kwargs: dict[str, Any] = {}
        if timestamp_ms >= 0:
            kwargs["timestamp"] = timestamp_ms
        if partition != -1:  # -1: the producer's partitioner decides
            kwargs["partition"] = self.staging_partition if partition is None else partition
        clients.produce_waiting(self.producer, topic, value=value, key=key, headers=hdrs, **kwargs)

    def _begin(self) -> TxnFailure | None:
        if self.in_txn:
            return None
        failure = self._txn(self.producer.begin_transaction)
        self.in_txn = failure is None
        return failure

    # -- transactions ---------------------------------------------------------------

    def due(self, now: float, interval_s: float) -> bool:
        """Time to seal? ``interval_s``: how long a transaction may stay open now (the
        worker's choice: short while keeping up, longer while catching up a backlog)."""
        return self.pending is None and self.txn.due(now, interval_s)

    def due_in(self, now: float, interval_s: float) -> float | None:
        """Seconds until the open transaction is due by age (None: none open, or a commit
        is still under way)."""
        return None if self.pending is not None else self.txn.due_in(now, interval_s)

    def commit(
        self,
        positions: dict[TopicPartition, int],
        caught_up: set[TopicPartition],
        known_until_us: int | None = None,
    ) -> TxnFailure | None:
        """Seal and commit now, on this thread; the failure if it did not commit."""
        failure = self.seal(positions, caught_up, known_until_us) or self.finish()
        if failure is None:
            self.committed()
        return failure

    def seal(
        self,
        positions: dict[TopicPartition, int],
        caught_up: set[TopicPartition],
        known_until_us: int | None = None,
    ) -> TxnFailure | None:
        """End the open transaction: what waits is sent, then a mark per partition.
        Records taken from now on belong to the next one. Returns the failure, if any
        (the task must then end: :meth:`failed`).

        ``positions`` are the reader's fetch positions (past skipped aborted records and
        transaction markers); ``caught_up`` the partitions with no backlog, whose
        resolved_ts may advance to now; ``known_until_us`` (ordered feeds) when the
        source's topics were last listed, which no resolved_ts passes
        (:func:`ordered.next_resolved`).
        """
        assert self.pending is None
        failure = self._begin()
        for state in self.partitions.values():
            # the records first: a mark covers what precedes it
            failure = failure or self._ship(state)
        if failure is not None:
            return failure
        for tp, offset in positions.items():
            if tp in self.partitions:
                self.txn.skip_to(self.partitions[tp], offset)
        sealed = self.txn.seal()
        now_us = int(time.time() * 1_000_000)
        lateness_us = self.ctx.feed.config.lateness_ms * 1000
        for tp, state in self.partitions.items():
            if self.ctx.ordered:
                resolved = ordered.next_resolved(
                    previous=state.resolved_ts_us,
                    watermarked=state.watermarked,
                    watermark_us=state.watermark_us,
                    newest_commit_ts_us=state.last_ts_us,
                    caught_up=tp in caught_up,
                    now_us=now_us,
                    lateness_us=lateness_us,
                    known_until_us=known_until_us,
                )
                mark_headers = ordered.ordered_mark_headers(resolved, state.watermarked)
            else:
                resolved = max(
                    (now_us if tp in caught_up else state.last_ts_us) - lateness_us,
                    state.resolved_ts_us,  # resolved_ts never goes backwards
                    0,
                )
                mark_headers = MARK_HEADERS
            if state.gaps:
                mark_headers = [*mark_headers, (headers.GAPS, carry(list(state.gaps)).encode())]
            mark = records.resolved_mark(
                source_cluster=self.ctx.source_cluster_id,
                topic=tp.topic,
                partition=tp.partition,
                resolved_ts_us=resolved,
                next_offset=sealed[state],
            )
            try:
                self._produce(self.ctx.changes_topic, mark, state.key, mark_headers)
            except KafkaException as err:
                return TxnFailure.of(err)
            state.pending_resolved_us = resolved
            metrics.RESOLVED_TS.labels(*state.labels).set(resolved / 1e6)
        return None

    def finish(self) -> TxnFailure | None:
        """Commit the sealed transaction (any thread): a mirror feed's OffsetSyncs first,
        from the delivery reports of its copies. Returns the failure if it did not
        commit: fenced, copies interleaved or not delivered, the commit refused."""
        if not self.ctx.ordered:
            try:
                left = clients.flush(self.producer, 60)  # every delivery report is in
            except KafkaException as err:  # failed fatally: fenced, most likely
                return TxnFailure.of(err)
            if left:
                return TxnFailure(Outcome.FAILED, f"{left} copies still undelivered")
            for tp, state in self.partitions.items():
                route = state.route
                if route is None or not route.blocks:
                    continue
                runs = route.runs()
                if isinstance(runs, CopyProblem):
                    return TxnFailure(Outcome.FAILED, runs.detail)
                for run in runs:
                    value = records.offset_sync(
                        feed=self.ctx.name,
                        source_cluster=self.ctx.source_cluster_id,
                        topic=tp.topic,
                        partition=tp.partition,
                        target_topic=route.target_topic,
                        target_partition=route.partition,
                        source_start=run.source_start,
                        source_end=run.source_end,
                        target_start=run.target_start,
                    )
                    key = records.offset_sync_key(self.ctx.name, tp.topic, tp.partition)
                    try:
                        self._produce(topics.OFFSET_SYNCS, value, key, None, partition=-1)
                    except KafkaException as err:
                        return TxnFailure.of(err)
                    metrics.OFFSET_SYNCS.labels(self.ctx.name).inc()
        started = time.monotonic()
        failure = self._txn(self.producer.commit_transaction, 60)
        if failure is None:
            elapsed = time.monotonic() - started
            metrics.TRANSACTION_COMMIT_SECONDS.labels(self.ctx.name).observe(elapsed)
        return failure

    def committed(self) -> Decision:
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
            state.resolved_ts_us = state.pending_resolved_us
            if state.route is not None:  # a mirror partition: its copies are in the target
                metrics.CHECKPOINT_TS.labels(*state.labels).set(state.resolved_ts_us / 1e6)
        self.in_txn = False
        metrics.TRANSACTIONS.labels(self.ctx.name).inc()
        return self.txn.finished(Outcome.COMMITTED, time.monotonic())

    def failed(self, failure: TxnFailure) -> Decision:
        """The task's transaction failed (sending, sealing or committing): what next
        (core/task_txn.py, invariant C: a failed task never goes on by itself)."""
        if self.txn.phase is Phase.COMMITTING:
            return self.txn.finished(failure.outcome, time.monotonic(), failure.detail)
        return self.txn.fail(failure.outcome, failure.detail)

    def _txn(self, call: Callable[..., None], *args: float) -> TxnFailure | None:
        """Run a transactional call; retriable errors are retried, anything else is
        returned as the failure (fenced: another instance owns the task)."""
        err: KafkaError | None = None
        for _attempt in range(6):
            try:
                clients.served(call, *args)  # a commit serves delivery reports too
                return None
            except KafkaException as exc:
                err = exc.args[0]
                if err is None or not err.retriable() or clients.is_fenced(err):
                    break
                time.sleep(0.2)
        assert err is not None
        if clients.is_fenced(err):
            return TxnFailure(
                Outcome.FENCED,
                f"task {self.transactional_id} fenced: another instance owns it ({err.str()})",
            )
        return TxnFailure(Outcome.FAILED, err.str())

    def close(self) -> None:
        """Let the producer go. A task that ended in a failure drops what it still
        holds (its transaction is settled by the next owner's ``init_transactions``)."""
        try:
            if self.txn.phase is Phase.DEAD:
                self.producer.purge()
            clients.flush(self.producer, 5)
        except KafkaException as err:  # a fenced producer has nothing left to deliver
            log.info("task %d: producer closed (%s)", self.staging_partition, err)


def transactional_id(feed: str, staging_partition: int) -> str:
    return ids.puller_transactional_id(feed, staging_partition)
