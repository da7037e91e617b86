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

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from crossfeed.core import provenance
from crossfeed.core.gaps import Gap
from crossfeed.core.partitions import TopicPartition
from crossfeed.core.task_txn import Decision, Outcome, Phase, TaskTxn
from crossfeed.kafka import clients
from crossfeed.kafka.protocols import Message, TransactionalProducer
from crossfeed.services.puller import letters, marks, metrics, ordered, shipping
from crossfeed.services.puller.copies import CopyProblem, Route
from crossfeed.services.puller.shipping import COPY_OVERHEAD
from crossfeed.services.puller.task_state import FeedContext, PartitionState, SchemaRefs
from crossfeed.services.puller.txn_producer import TaskProducer, TxnFailure
from crossfeed.wire import confluent_avro, ids, records, topics

log = logging.getLogger(__name__)


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
    pending: Future[TxnFailure | None] | None = None  # the sealed transaction's commit, under way
    pending_since: float | None = None  # when that commit was handed to its thread
    # registry ids the copies not yet sealed name (ctx.follower): in the target registry
    # before their transaction commits
    schema_ids: set[int] = field(default_factory=set)

    out: TaskProducer = field(init=False)  # the producer, as the transactions use it

    def __post_init__(self) -> None:
        self.txn = TaskTxn(self.ctx.limits, last_commit=time.monotonic())
        self.out = TaskProducer(self.producer, self.staging_partition, self.transactional_id)

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
            schemas=None if self.ctx.schemas_topic is None else SchemaRefs(),
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
        """Send the partition's dead letters and records. Never while a commit is under
        way: the producer's next transaction waits for it."""
        assert self.pending is None and self.txn.may_send()
        return shipping.ship(self.ctx, self.out, state)

    def dead_letter(
        self, msg: Message, error_class: str, reason: str, state: PartitionState
    ) -> None:
        """A source record that is not copied, kept in ``_crossfeed.dlq`` with why."""
        record = (msg.key(), msg.value(), msg.headers() or [])
        letters.letter(self.ctx, state, record, msg.offset(), error_class, reason)

    def gap_letter(self, state: PartitionState, gap: Gap) -> None:
        """The records of ``gap`` will never be copied: their dead letter goes in the
        transaction whose mark moves the partition past the gap (both go with the next
        one when a commit is under way)."""
        letters.gap_letter(self.ctx, state, gap)
        self.txn.skip_to(state, gap.end)

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
        failure = self.out.begin()
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
        for tp, state in self.partitions.items():
            resolved, mark = marks.resolved_mark(
                self.ctx,
                state,
                sealed[state],
                caught_up=tp in caught_up,
                now_us=now_us,
                known_until_us=known_until_us,
            )
            try:
                self.out.produce(self.ctx.changes_topic, *mark)
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
            for sync in marks.offset_syncs(self.ctx, self.partitions):
                if isinstance(sync, CopyProblem):
                    return TxnFailure(Outcome.FAILED, sync.detail)
                try:
                    self.out.produce(topics.OFFSET_SYNCS, *sync, partition=-1)
                except KafkaException as err:
                    return TxnFailure.of(err)
                metrics.OFFSET_SYNCS.labels(self.ctx.name).inc()
        started = time.monotonic()
        failure = self.out.commit()
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
        self.out.in_txn = False
        metrics.TRANSACTIONS.labels(self.ctx.name).inc()
        return self.txn.finished(Outcome.COMMITTED, time.monotonic())

    def failed(self, failure: TxnFailure) -> Decision:
        """The task's transaction failed (sending, sealing or committing): what next
        (core/task_txn.py, invariant C: a failed task never goes on by itself)."""
        if self.txn.phase is Phase.COMMITTING:
            return self.txn.finished(failure.outcome, time.monotonic(), failure.detail)
        return self.txn.fail(failure.outcome, failure.detail)

    def close(self) -> None:
        """Let the producer go (what a failed task holds is dropped: txn_producer.py)."""
        self.out.close(dead=self.txn.phase is Phase.DEAD)


def transactional_id(feed: str, staging_partition: int) -> str:
    return ids.puller_transactional_id(feed, staging_partition)
