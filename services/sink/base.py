"""What the two sinks (Kafka: kafka/sink.py, PostgreSQL: postgres/sink.py) share: the
loop over the sorted stream that does what the
:class:`~crossfeed.services.sink.sorted_stream.Sequencer` says with each record (each
target fills in the hooks), the committed position, the open transaction's counters and
when it is due, dead letters, the metrics of a commit, the heartbeat and /status."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from crossfeed.config import Settings
from crossfeed.core.timestamps import commit_interval_ms
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.kafka.reachability import wait_for_cluster
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.services.sink import dead_letters, metrics, reporting
from crossfeed.services.sink.inputs import input_for
from crossfeed.services.sink.reporting import SORTED_PARTITION as SORTED_PARTITION
from crossfeed.services.sink.schemas import SchemaStore
from crossfeed.services.sink.sorted_stream import (
    ONLY_APPLY,
    Applied,
    BadMarker,
    Kind,
    Sequencer,
    Step,
    classify,
)
from crossfeed.wire import ids, topics

log = logging.getLogger(__name__)

CONSUME_BATCH = 2000
READ_WAIT_S = 0.05
GC_THRESHOLD = 50_000  # allocations between two runs of the cycle collector


def relax_cycle_collector() -> None:
    """A sink's hot path makes a few containers per change (dicts, tuples, row changes),
    none in a reference cycle: reference counting frees them. At CPython's default
    threshold (700 allocations) the cycle collector ran every ~100 changes and walked the
    rows held for the batch: ~18% of the PostgreSQL sink's CPU (sink-alone harness:
    19.2-19.7 -> 15.3-16.4 us per row change). It still runs, rarely; what start-up made
    (modules, settings) is frozen out of its walks."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 100)


def commit_interval_s(msgs: list[Any], keep_up_ms: int, backlog_ms: int) -> float:
    """How long a transaction may stay open after a read of ``msgs``: catching up a
    backlog (the read filled the batch with old records), longer: fewer, larger commits
    (timestamps.py)."""
    newest = msgs[-1].timestamp()[1]
    full = len(msgs) == CONSUME_BATCH
    return commit_interval_ms(full, newest, time.time() * 1000, keep_up_ms, backlog_ms) / 1000


class OrderedSink:
    """Base of the sinks (not a worker by itself)."""

    def __init__(
        self,
        settings: Settings,
        feed: FeedSpec,
        instance_id: str,
        control_conf: dict[str, Any],
        static: bool = False,
    ) -> None:
        self.settings = settings
        self.static = static  # a fixed instance name (--instance)
        self.feed = feed
        self.instance_id = instance_id
        self.control_conf = control_conf
        self.sorted_topic = topics.sorted_(feed.name)
        self.labels = (feed.name,)
        self.keep_up_ms = settings.sink.commit_interval_ms
        self.backlog_ms = settings.sink.backlog_commit_interval_ms
        self.interval_s = self.keep_up_ms / 1000  # of the open transaction, after a read
        self.max_events = settings.sink.max_batch_records
        self.heartbeats: HeartbeatSender | None = None
        self.address = ""
        self.state = "starting"
        self.last_error: str | None = None
        self.committed = Applied()  # what is durably in the target with the data
        self.committed_offset = -1  # the sorted offset to resume from (-1: the start)
        self.sequencer = Sequencer()
        self.input = input_for(feed)  # what differs for Debezium input (inputs.py)
        # Debezium input: the changes' Connect schemas, by reference (made with the clients).
        self.schemas: SchemaStore | None = None
        self._init_target()
        self._reset_txn()

    # -- start and stop -------------------------------------------------------------

    def _prepare_cluster(self, alias: str, conf: dict[str, Any], stop: threading.Event) -> Any:
        """Wait for the cluster of the sorted stream; make sure it and the DLQ exist;
        returns an admin client."""
        wait_for_cluster(alias, conf, stop)
        admin = clients.admin(conf)
        kafka_topics.ensure_internal(admin, topics.DLQ)
        kafka_topics.ensure_internal(admin, self.sorted_topic)
        self.schemas = self.input.schema_store(self.feed.name, conf)
        return admin

    def _consumer_conf(self) -> dict[str, Any]:
        return {
            "group.id": ids.sink_group(self.feed.name),
            "client.id": self.instance_id,
            "fetch.wait.max.ms": 50,
            "queued.max.messages.kbytes": 65536,
        }

    def _start_heartbeats(self) -> None:
        ensure_control_topics(self.control_conf)
        self.heartbeats = HeartbeatSender(
            self.control_conf, self.instance_id, "sink", self._heartbeat
        ).start()

    def run(self, stop: threading.Event) -> None:
        self.start(stop)
        try:
            while not stop.is_set():
                self.step(stop)
        finally:
            self.shutdown()

    def _close(self, consumer: Any, producer: Any) -> None:
        if consumer is not None:
            consumer.close()
        if self.schemas is not None:
            self.schemas.close()
        if self.heartbeats is not None:
            self.heartbeats.leave()
        if producer is not None:
            producer.flush(10)

    def _read(self, consumer: Any, handle: Callable[[Any], bool]) -> None:
        """One read of the sorted stream, each record to ``handle`` (False: stop here)."""
        msgs = clients.read_batch(consumer, CONSUME_BATCH, self._read_wait())
        if msgs:
            self.interval_s = commit_interval_s(msgs, self.keep_up_ms, self.backlog_ms)
        for msg in msgs:
            error = msg.error()
            if error:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", error)
                continue
            if not handle(msg):
                break

    # -- the sorted stream ----------------------------------------------------------

    def _read_and_commit(self, consumer: Any) -> None:
        """One read of the sorted stream; then the open transaction, if due and whole."""
        self._read(consumer, self._handle)
        if self.in_txn and self.sequencer.open is None and self._due():
            self._commit()

    def _handle(self, msg: Any) -> bool:
        """One sorted record; False when the input was rewound (stop reading the batch)."""
        offset = msg.offset()
        if msg.partition() != SORTED_PARTITION:
            return True
        if not self.in_txn:
            self._begin()
        hdrs = msg.headers()  # a new list each call: read once, handed to _apply
        try:
            marker = classify(hdrs)
        except BadMarker as err:
            self.next_offset = offset + 1
            self._dead_letter_here(msg, "BadMarker", f"sorted record with a bad marker: {err}")
            return True
        if marker.kind is Kind.DATA:  # most records: Sequencer.step's APPLY or DROP
            # Passed before it is applied: a write the database refuses makes the sink
            # write again change by change up to and including this one.
            self.next_offset = offset + 1
            if self.sequencer.data():
                self._apply(msg, hdrs)
            return True
        steps = self.sequencer.step(offset, marker)
        if steps is ONLY_APPLY:  # an inline change inside its transaction: most of them
            self.next_offset = offset + 1
            self._apply(msg, hdrs)
            return True
        boundary = False  # a source transaction ended here: a place to commit
        for step in steps:
            if step is Step.APPLY:  # an inline change that also opens or ends one
                self.next_offset = offset + 1
                self._apply(msg, hdrs)
            elif step is Step.OPEN:
                self._opened()
            elif step is Step.COMPLETE:
                self._completed()
                self.txn_sources += 1
                boundary = True
            elif step is Step.RESOLVED:
                boundary = True
            elif step is Step.CUT_SHORT:
                log.warning("feed %s: %s", self.feed.name, self.sequencer.problem)
                metrics.CUT_SHORT.labels(*self.labels).inc()
                if not self._cut_short():
                    return False
            elif step is Step.SKIP_CUT:
                # A cut-short transaction found before the last rewind: commit the
                # whole ones before it now (up to its begin, so a marker's offset is
                # passed only after its steps), so a later rewind does not undo them
                # again.
                if self.txn_events or self.txn_sources:
                    self._commit()
                    self._begin()
            elif step is Step.DROP and marker.starts:
                metrics.REPLAYED.labels(*self.labels).inc()
        self.next_offset = offset + 1
        if boundary and self._due():
            self._commit()  # the next record opens the next target transaction
        return True

    # -- what each target does (hooks) ------------------------------------------------

    def _init_target(self) -> None:
        """The target's settings (from ``self.feed.sink``) and state; clients are made
        by start()."""
        raise NotImplementedError

    def start(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def step(self, stop: threading.Event) -> None:
        """One turn of the loop: a read, maybe a commit, and what failures lead to."""
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def _begin(self) -> None:
        """A record is read with no target transaction open: open one."""
        self._open_txn()

    def _apply(self, msg: Any, hdrs: list[Any] | None) -> None:
        """Write a data record of the open source transaction (``hdrs``: its headers)."""
        raise NotImplementedError

    def _opened(self) -> None:
        """A source transaction begins (its records follow)."""

    def _completed(self) -> None:
        """The open source transaction is whole."""

    def _cut_short(self) -> bool:
        """Throw away what was written of the source transaction cut short
        (``self.sequencer.cut``); False: the input was rewound instead."""
        raise NotImplementedError

    def _commit(self) -> None:
        """What was read, with the position, in one target transaction."""
        raise NotImplementedError

    def _dead_letter_here(self, msg: Any, error_class: str, reason: str) -> None:
        raise NotImplementedError

    def _heartbeat(self) -> HeartbeatContent:
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- the open transaction -------------------------------------------------------

    def _reset_txn(self) -> None:
        """Nothing read into a target transaction (targets add what they hold)."""
        self.in_txn = False  # a target transaction is open (records were read into it)
        self.txn_started = 0.0
        self.txn_sources = 0  # whole source transactions in it
        self.txn_events = 0  # change events written in it
        self.txn_bytes = 0
        self.txn_dead = 0
        self.skipped: dict[str, int] = {}  # rows skipped by last writer wins, per table
        self.next_offset = -1  # sorted offset after the last record read
        self.newest_ts_ms = -1

    def _open_txn(self) -> None:
        if not self.in_txn:
            self.in_txn = True
            self.txn_started = time.monotonic()

    def _read_wait(self) -> float:
        """How long a read may wait: until the open transaction is due, at most."""
        if not self.in_txn or self.sequencer.open is not None:
            return READ_WAIT_S if self.in_txn else 0.5
        left = self.txn_started + self.interval_s - time.monotonic()
        return max(0.0, min(READ_WAIT_S, left))

    def _due(self) -> bool:
        return (
            self.txn_events >= self.max_events
            or time.monotonic() - self.txn_started >= self.interval_s
        )

    def _next_applied(self) -> Applied:
        """The position and checkpoint_ts a commit now makes durable."""
        return Applied(
            self.sequencer.applied, max(self.committed.checkpoint_ts, self.sequencer.resolved)
        )

    def _restart_sequencer(self, known_cut: tuple[int, ...] = ()) -> None:
        """Back to the committed position (what was read after it will be read again)."""
        self.sequencer = Sequencer(self.committed.position, known_cut)
        self.sequencer.resolved = self.committed.checkpoint_ts
        if self.committed.checkpoint_ts:
            metrics.CHECKPOINT_TS.labels(*self.labels).set(self.committed.checkpoint_ts / 1e6)

    def _count_commit(self) -> None:
        reporting.count_commit(self)
        if self.state == "error":
            log.info("feed %s: sink writing again", self.feed.name)
            self.state, self.last_error = "normal", None

    def _value(self, msg: Any, hdrs: list[Any] | None) -> bytes | None:
        """A data record's whole value: a Debezium payload gets its schema back
        (UnknownSchema if it cannot be found)."""
        if self.schemas is None:
            return msg.value()  # type: ignore[no-any-return]
        return self.schemas.restore(msg.value(), hdrs)

    def _dead_letter(
        self, msg: Any, error_class: str, reason: str, producer: Any, cluster: str
    ) -> None:
        """``msg`` (a sorted record) to ``_crossfeed.dlq`` (dead_letters.py)."""
        why = (error_class, reason)
        dead_letters.send(self.feed, msg, why, producer, cluster, self._value)
        self.txn_dead += 1

    def _heartbeat_content(self, applying: bool, **extra: Any) -> HeartbeatContent:
        return reporting.heartbeat_content(self, applying, **extra)

    def _status(self, applying: bool, target: str, **extra: Any) -> dict[str, Any]:
        return reporting.status(self, applying, target, **extra)
