"""Liveness and shared state on Kafka topics: heartbeats out, compacted topics in.

Every instance (puller, sink, sorter, coordinator) sends a Heartbeat to
``_crossfeed.heartbeats`` on the control cluster every ``interval_s``; a graceful
shutdown sends a last one with state ``leaving`` so its tasks move at once. Readers
follow a compacted topic from its start with a :class:`TopicTail`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from crossfeed import __version__
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.wire import codec, topics

log = logging.getLogger(__name__)


def ensure_control_topics(conf: dict[str, Any]) -> None:
    """``_crossfeed.state`` and ``_crossfeed.heartbeats``: one partition each (one order)."""
    admin = clients.admin(conf)
    kafka_topics.ensure_internal(admin, topics.STATE)
    kafka_topics.ensure_internal(admin, topics.HEARTBEATS)


@dataclass
class HeartbeatContent:
    """What an instance says about itself in each heartbeat (read at send time)."""

    tasks: list[str] = field(default_factory=list)
    feeds: list[str] = field(default_factory=list)
    state: str = "running"
    address: str = ""
    checkpoints: dict[str, int] = field(default_factory=dict)  # sinks: checkpoint_ts
    resolved: dict[str, int] = field(default_factory=dict)  # pullers, sorters: resolved_ts
    laggards: dict[str, int] = field(default_factory=dict)  # sorters: since, µs
    last_error: str = ""
    notices: list[str] = field(default_factory=list)  # pullers: gaps not acknowledged
    checkpoint_ts_us: int = 0  # sinks of ordered feeds: the feed's checkpoint_ts
    syncpoint_ts_us: int = 0  # database sinks: the newest syncpoint
    syncpoint_at_ms: int = 0


class HeartbeatSender:
    """Sends heartbeats from a daemon thread until :meth:`leave`."""

    def __init__(
        self,
        conf: dict[str, Any],
        instance_id: str,
        role: str,
        content: Callable[[], HeartbeatContent],
        interval_s: float = 1.0,
    ) -> None:
        self.instance_id = instance_id
        self.role = role
        self.content = content
        self.interval_s = interval_s
        self.started_at_ms = int(time.time() * 1000)
        self.conf = conf
        self.producer = self._new_producer()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def _new_producer(self) -> Any:
        # Not idempotent: a lost heartbeat is replaced a second later, and an idempotent
        # producer can fail for good (out-of-order sequence numbers after the control
        # cluster lost its tail in a crash) — the instance would look dead from then on.
        return clients.producer(self.conf, **{"linger.ms": 0, "enable.idempotence": False})

    def start(self) -> HeartbeatSender:
        self._thread.start()
        return self

    def _record(self, state: str | None = None) -> bytes:
        content = self.content()
        return codec.encode(
            "Heartbeat",
            {
                "instance_id": self.instance_id,
                "role": self.role,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "version": __version__,
                "started_at_ms": self.started_at_ms,
                "sent_at_ms": int(time.time() * 1000),
                "tasks": content.tasks,
                "feeds": content.feeds,
                "state": state or content.state,
                "address": content.address,
                "checkpoints": content.checkpoints,
                "resolved": content.resolved,
                "laggards": content.laggards,
                "last_error": content.last_error,
                "notices": content.notices,
                "checkpoint_ts_us": content.checkpoint_ts_us,
                "syncpoint_ts_us": content.syncpoint_ts_us,
                "syncpoint_at_ms": content.syncpoint_at_ms,
            },
        )

    def send(self, state: str | None = None) -> None:
        self.producer.produce(
            topics.HEARTBEATS, key=self.instance_id.encode(), value=self._record(state)
        )
        self.producer.poll(0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.send()
            except Exception as err:  # a heartbeat must never kill the instance
                log.warning("heartbeat failed: %s", err)
                if isinstance(err, KafkaException) and err.args and clients.is_fatal(err.args[0]):
                    self.producer = self._new_producer()
            self._stop.wait(self.interval_s)

    def leave(self) -> None:
        """Stop beating and say so, so the leader reassigns at once."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.send("leaving")
            self.producer.flush(5)
        except Exception as err:
            log.warning("could not send the leaving heartbeat: %s", err)


class TopicTail:
    """Follows every partition of a (compacted) topic from its start, read_committed.

    ``on_record(key, value)`` runs on the tail's thread for each record in log order
    (``value`` is None for a tombstone). ``caught_up`` is set once the tail has read
    everything that existed when it started.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        on_record: Callable[[str, bytes | None], None],
        name: str = "tail",
    ) -> None:
        self.topic = topic
        self.on_record = on_record
        self.conf = conf
        self.consumer = clients.consumer(conf, **{"group.id": f"crossfeed-tail-{os.getpid()}"})
        self.caught_up = threading.Event()
        self._read_up_to: dict[int, int] = {}  # partition -> position of the tail
        self._ends: Any = None  # a client of its own for read_to_end (see there)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> TopicTail:
        self._thread.start()
        return self

    def _partitions(self) -> list[int]:
        """The topic's partitions, waiting while it has none yet (just created: no leader)."""
        while not self._stop.is_set():
            try:
                meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
                if meta is not None and meta.error is None and meta.partitions:
                    return sorted(meta.partitions)
            except Exception as err:  # KafkaException: the cluster is not answering yet
                log.debug("waiting for %s: %s", self.topic, err)
            self._stop.wait(0.5)
        return []

    def _loop(self) -> None:
        parts = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self._partitions()]
        ends: dict[int, int] = {}
        while not self._stop.is_set() and len(ends) < len(parts):
            try:
                ends = {
                    tp.partition: self.consumer.get_watermark_offsets(tp, timeout=10)[1]
                    for tp in parts
                }
            except Exception as err:  # a new partition's leader is not elected yet
                log.debug("waiting for the end of %s: %s", self.topic, err)
                self._stop.wait(0.5)
        self.consumer.assign(parts)
        while not self._stop.is_set():
            for msg in self.consumer.consume(1000, timeout=0.2):
                if msg.error():
                    continue
                key = (msg.key() or b"").decode("utf-8", "replace")
                try:
                    self.on_record(key, msg.value())
                except Exception:
                    log.exception("could not apply %s record %r", self.topic, key)
            positions = self.consumer.position([TopicPartition(self.topic, p) for p in ends])
            self._read_up_to = {tp.partition: tp.offset for tp in positions}
            if not self.caught_up.is_set() and all(
                tp.offset >= ends[tp.partition] or ends[tp.partition] == 0 for tp in positions
            ):
                self.caught_up.set()
        self.consumer.close()

    def read_to_end(self, timeout_s: float) -> bool:
        """Wait until the tail has applied every record the topic holds now; False if it
        did not within ``timeout_s`` (or the cluster did not say where the end is).

        The end is asked for by a client of its own: a call on the tail's consumer from
        another thread waits behind its back-to-back reads."""
        deadline = time.monotonic() + timeout_s
        try:
            if self._ends is None:
                self._ends = clients.consumer(
                    self.conf, **{"group.id": f"crossfeed-tail-end-{os.getpid()}"}
                )
            parts = sorted(self._read_up_to)
            ends = {
                p: self._ends.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=timeout_s
                )[1]
                for p in parts
            }
        except Exception as err:  # KafkaException: the cluster does not answer
            log.debug("cannot find the end of %s: %s", self.topic, err)
            return False
        while time.monotonic() < deadline:
            read = self._read_up_to
            if parts and all(read.get(p, -1) >= end for p, end in ends.items()):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._ends is not None:
            self._ends.close()
