"""The coordinator's memory of ``_crossfeed.state``: every record folded in log order.

A :class:`StateStore` follows the topic from its start (read_committed) on its own
thread and keeps the latest feeds, statuses, assignments and the lease. Nothing else
changes this memory: the leader writes records (see ``writer.py``) and waits until the
store has read them back, so every coordinator — leader or standby — knows exactly what
the log says, in the log's order.

How records are folded, and the compaction caveat, is in ``fold.py``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from crossfeed.core.outage import Outage
from crossfeed.kafka import clients
from crossfeed.services.coordinator.fold import StateFold, StateView
from crossfeed.wire import codec, topics

log = logging.getLogger(__name__)


class StateStore:
    """Follows ``_crossfeed.state`` and folds it; thread-safe snapshots."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self._conf = conf
        self._consumer = self._new_consumer()
        self._admin = clients.admin(conf)  # asks for the last stable offset
        self.sync_error = ""  # why the last sync failed ("" once one succeeds)
        self.outage = Outage()  # since the first failed sync, until one succeeds
        self._partition = TopicPartition(topics.STATE, 0)
        self._lock = threading.Condition()
        self._fold = StateFold()
        self._position = 0  # next offset to read: everything before it is folded
        self._snapshot = StateView()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="state-store", daemon=True)

    # -- reading the log -------------------------------------------------------------

    def _new_consumer(self) -> Any:
        return clients.consumer(
            self._conf,
            **{"group.id": f"crossfeed-coordinator-state-{os.getpid()}", "fetch.wait.max.ms": 50},
        )

    def start(self) -> StateStore:
        self._consumer.assign([TopicPartition(topics.STATE, 0, OFFSET_BEGINNING)])
        self._thread.start()
        return self

    def _replace_consumer(self, why: str) -> None:
        """A fresh reader where the last one stopped (a fatal error ends a client for good)."""
        log.warning("reading %s failed for good (%s): using a new reader", topics.STATE, why)
        old, self._consumer = self._consumer, self._new_consumer()
        self._consumer.assign([TopicPartition(topics.STATE, 0, self._position)])
        try:
            old.close()
        except Exception as err:  # a dead client may refuse even that
            log.debug("closing the old reader: %s", err)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self._consumer.consume(500, timeout=0.1)
                position = self._consumer.position([self._partition])[0].offset
            except Exception as err:  # the control cluster may be away for a while
                log.warning("reading %s failed: %s", topics.STATE, err)
                if isinstance(err, KafkaException) and err.args and clients.is_fatal(err.args[0]):
                    self._replace_consumer(err.args[0].str())
                self._stop.wait(1.0)
                continue
            fatal = next(
                (m.error() for m in messages if m.error() and clients.is_fatal(m.error())), None
            )
            if fatal is not None:
                self._replace_consumer(fatal.str())
                continue
            with self._lock:
                for msg in messages:
                    if msg.error():
                        continue
                    key = (msg.key() or b"").decode("utf-8", "replace")
                    try:
                        self._fold.apply(key, msg.value())
                    except (codec.CodecError, ValueError, KeyError) as err:
                        log.warning("ignoring unreadable %s record %r: %s", topics.STATE, key, err)
                    self._position = max(self._position, (msg.offset() or 0) + 1)
                if position >= 0:
                    # read_committed: the position also moves past transaction markers
                    self._position = max(self._position, position)
                if messages:
                    self._snapshot = self._fold.view()
                self._lock.notify_all()

    # -- what others ask -------------------------------------------------------------

    def snapshot(self) -> StateView:
        with self._lock:
            return self._snapshot

    @property
    def position(self) -> int:
        with self._lock:
            return self._position

    def wait_for(self, offset: int, timeout_s: float) -> bool:
        """Wait until every record before ``offset`` is folded; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._position < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def end_offset(self, timeout_s: float = 10.0) -> int:
        """The last stable offset: everything before it is committed (or aborted), so a
        transaction left open by a killed writer does not hold a reader back."""
        futures = self._admin.list_offsets(
            {self._partition: OffsetSpec.latest()},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout_s,
        )
        return int(futures[self._partition].result(timeout=timeout_s).offset)

    def sync(self, timeout_s: float = 10.0) -> bool:
        """Read every record committed so far; False on timeout or trouble."""
        began = time.monotonic()
        deadline = began + timeout_s
        while True:
            try:
                end = self.end_offset(max(deadline - time.monotonic(), 1.0))
                break
            except Exception as err:  # KafkaException, a timeout: the cluster may be away,
                # or the topic was just created and has no leader yet: try again until the
                # deadline rather than give up at once. With a fresh client: one that saw
                # the cluster restart may keep its stale leader epoch and be refused with
                # FENCED_LEADER_EPOCH for ever.
                self._admin = clients.admin(self._conf)
                if time.monotonic() >= deadline:
                    log.warning("cannot find the end of %s: %s", topics.STATE, err)
                    self.sync_error = f"cannot read {topics.STATE}: {err}"
                    self.outage.failed(began)
                    return False
                time.sleep(0.5)
        if not self.wait_for(end, max(deadline - time.monotonic(), 0.1)):
            self.sync_error = f"{topics.STATE} not read to its end in {timeout_s:.0f}s"
            self.outage.failed(began)
            return False
        self.sync_error = ""
        self.outage.answered()
        return True

    def unreachable_for(self) -> float:
        """Seconds since the first sync that failed, of those since the last good one
        (0 after a good one): not since the last good one, which may be long before the
        cluster stopped answering (syncs run when a client asks)."""
        return self.outage.lasted(time.monotonic())
