"""Who runs which puller task: the feed's consumer group, or the coordinator.

- ``GroupMembership`` (a feed file, no coordinator): instances join the consumer group
  ``crossfeed-puller.<feed>`` on the target cluster, subscribed to the changes topic.
  The group only hands out task numbers (staging partitions); they stay paused and
  are never read. A dead instance's tasks move after ``session.timeout.ms``.
- ``CoordinatorMembership``: the leader writes ``assignment/<feed>/puller/<instance>``
  records to ``_crossfeed.state``; an assignment is applied only if its leader epoch is
  at least the highest seen, so a deposed leader's late writes change nothing. It also
  follows the feed's own record there (``feed/<feed>``), so a feed updated through
  ``PUT /v1/changefeeds/<feed>`` reaches the running worker (``newer_spec``).

Either way, fencing does not depend on membership being right: a task's
transactional.id is fixed, and its new owner's ``init_transactions`` fences the old one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.membership import TopicTail
from crossfeed.state import feed_from_record
from crossfeed.wire import codec, ids, topics

log = logging.getLogger(__name__)

READ_TO_END_S = 2.0  # to read the newest assignment before starting a task
RETRY_S = 1.0  # a task that could not start is tried again this much later


class TaskHost(Protocol):
    """The worker side: starts and drops tasks on the main thread."""

    tasks: dict[int, Any]

    def start_tasks(self, staging_partitions: list[int]) -> dict[int, KafkaException]:
        """Start these tasks; returns those that did not start, with why."""
        ...

    def drop_task(self, staging_partition: int, *, commit: bool) -> None: ...


def start_tasks(host: TaskHost, tasks: list[int]) -> bool:
    """Start ``tasks`` on ``host``; False if some did not start (logged; the caller tries
    them again after RETRY_S)."""
    failed = host.start_tasks(tasks)
    for s, err in sorted(failed.items()):  # the target does not answer: again in a while
        log.warning("task %d not started (%s); retrying in %.0fs", s, err, RETRY_S)
    return not failed


class GroupMembership:
    def __init__(
        self,
        target_conf: dict[str, Any],
        feed: str,
        instance_id: str,
        session_timeout_s: float,
        static: bool = False,
    ) -> None:
        conf: dict[str, Any] = {
            "group.id": ids.puller_group(feed),
            "client.id": instance_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": int(session_timeout_s * 1000),
            "heartbeat.interval.ms": 1000,
        }
        # An instance with a stable id (--instance) is a static member: restarted, it
        # takes its tasks back at once, without a rebalance (the price: it does not leave
        # the group on close). Static members get an eager assignment: a cooperative one
        # moves a task in two rebalances (revoked from its owner, then given to the new
        # member), and an owner killed between the two, then restarted, is handed back its
        # cached share without the second rebalance ever happening — the moved tasks were
        # left to nobody for as long as the members kept coming back (seen in make test).
        self.eager = static
        if static:
            conf["group.instance.id"] = instance_id
            conf["partition.assignment.strategy"] = "roundrobin"
        self.target_conf = target_conf
        self.conf = conf
        self.consumer = clients.consumer(target_conf, **conf)
        self.changes_topic = topics.changes(feed)
        self.host: TaskHost | None = None
        self.owned: set[int] = set()  # tasks the group gives us (running or to start)
        self.retry_at = 0.0

    def start(self, host: TaskHost) -> None:
        self.host = host
        self._subscribe()

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.changes_topic],
            on_assign=self._assign,
            on_revoke=self._revoke,
            on_lost=self._lost,
        )

    def poll(self) -> None:
        assert self.host is not None
        try:
            msg = self.consumer.poll(0)  # group heartbeats; (re)assignment callbacks run here
            fatal = msg.error() if msg is not None and msg.error() else None
        except KafkaException as err:
            fatal = err.args[0]
        if fatal is not None and clients.is_fatal(fatal):
            self._replace_consumer(fatal.str())
            return
        # Tasks the group gave us that are not running: their start failed (the target
        # did not answer) or their producer failed for good and they were dropped.
        missing = sorted(self.owned - set(self.host.tasks))
        due = missing and time.monotonic() >= self.retry_at
        if due and not start_tasks(self.host, missing):
            self.retry_at = time.monotonic() + RETRY_S

    def _replace_consumer(self, why: str) -> None:
        """A fatal error ends a consumer for good (a static member "fenced by other
        consumer with same group.instance.id" after the target came back): its tasks
        stop, and a new member joins; the group gives them back (or to another)."""
        assert self.host is not None
        log.warning("task membership failed for good (%s): joining again", why)
        for s in sorted(self.owned):
            self.host.drop_task(s, commit=True)
        self.owned.clear()
        old, self.consumer = self.consumer, clients.consumer(self.target_conf, **self.conf)
        try:
            old.close()
        except KafkaException as err:  # a dead consumer may refuse even that
            log.debug("closing the old membership consumer: %s", err)
        self._subscribe()

    def _assign(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        if self.eager:  # the whole assignment, every time
            consumer.assign(partitions)
        else:  # what is added to it
            consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        self.owned |= {kp.partition for kp in partitions}
        self.retry_at = 0.0  # poll() starts them, on the worker's thread, with retries

    def _revoke(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        self._give_up(consumer, partitions, commit=True)

    def _lost(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        self._give_up(consumer, partitions, commit=False)

    def _give_up(self, consumer: Any, partitions: list[KafkaTP], *, commit: bool) -> None:
        """Stop the tasks of ``partitions``: their open transactions committed if
        ``commit`` (revoked), else left to the next owner to abort (lost)."""
        assert self.host is not None
        for kp in partitions:
            self.owned.discard(kp.partition)
            self.host.drop_task(kp.partition, commit=commit)
        if self.eager:
            consumer.unassign()
        else:
            consumer.incremental_unassign(partitions)

    def close(self) -> None:
        self.consumer.close()  # leaving the group hands the tasks over at once

    def newer_spec(self) -> FeedSpec | None:
        """A feed file's feed changes only when the process starts again."""
        return None


class CoordinatorMembership:
    def __init__(self, control_conf: dict[str, Any], feed: str, instance_id: str) -> None:
        self.feed = feed
        self.key = f"assignment/{feed}/puller/{instance_id}"
        self.lock = threading.Lock()
        self.max_epoch = -1
        self.desired: set[int] = set()
        self.generation = -1
        self.host: TaskHost | None = None
        self.retry_at = 0.0  # no task is started before (the last attempt failed)
        self.spec: FeedSpec | None = None  # the stored feed, when it changed since start
        self.spec_record: dict[str, Any] | None = None
        self.tail = TopicTail(control_conf, topics.STATE, self._on_record, name="assignments")

    def start(self, host: TaskHost) -> None:
        self.host = host
        self.tail.start()

    def _on_record(self, key: str, value: bytes | None) -> None:
        if key == "lease/coordinator" and value is not None:
            with self.lock:  # a new leader's epoch outdates every older assignment
                self.max_epoch = max(self.max_epoch, codec.decode("Lease", value)["epoch"])
            return
        if key == f"feed/{self.feed}" and value is not None:
            self._on_feed(codec.decode("FeedSpec", value))
            return
        if not key.startswith(f"assignment/{self.feed}/") or value is None:
            return
        record = codec.decode("Assignment", value)
        with self.lock:
            if record["epoch"] < self.max_epoch:
                log.warning(
                    "ignoring assignment from a deposed leader (epoch %d < %d)",
                    record["epoch"],
                    self.max_epoch,
                )
                return
            self.max_epoch = record["epoch"]
            if key != self.key or record["generation"] < self.generation:
                return
            self.generation = record["generation"]
            self.desired = {p["partition"] for p in record["partitions"]}

    def _on_feed(self, record: dict[str, Any]) -> None:
        with self.lock:
            first = self.spec_record is None
            if record == self.spec_record:
                return
            self.spec_record = record
            if not first:  # the first one read is the feed the process started with
                self.spec = feed_from_record(record)

    def newer_spec(self) -> FeedSpec | None:
        """The feed as updated since the last call (None: unchanged)."""
        with self.lock:
            spec, self.spec = self.spec, None
        return spec

    def poll(self) -> None:
        assert self.host is not None
        with self.lock:
            desired = set(self.desired)
            epoch, generation = self.max_epoch, self.generation
        current = set(self.host.tasks)
        for s in sorted(current - desired):
            log.info("task %d taken away (epoch %d, generation %d)", s, epoch, generation)
            self.host.drop_task(s, commit=True)
        to_start = sorted(desired - current)
        if not to_start or time.monotonic() < self.retry_at:
            return
        # Only from the newest assignment: an instance woken up (SIGCONT after SIGSTOP) or
        # back from an outage holds a view that may be stale, and starting a task that was
        # moved away meanwhile would fence its new owner.
        if not self.tail.read_to_end(READ_TO_END_S):
            self.retry_at = time.monotonic() + RETRY_S
            return
        # Reading to the end took a while; a newer assignment may have moved some of them
        # on meanwhile, and starting one anyway would fence its new owner.
        with self.lock:
            to_start = [s for s in to_start if s in self.desired]
            epoch, generation = self.max_epoch, self.generation
        if not to_start:
            return
        for s in to_start:
            log.info("starting task %d (epoch %d, generation %d)", s, epoch, generation)
        if not start_tasks(self.host, to_start):
            self.retry_at = time.monotonic() + RETRY_S

    def close(self) -> None:
        self.tail.stop()
