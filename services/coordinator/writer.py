"""The only way records get into ``_crossfeed.state``: fenced Kafka transactions.

Every coordinator uses the same ``transactional.id`` (:data:`TRANSACTIONAL_ID`). Opening
the writer (``init_transactions``) therefore fences the writer of every other
coordinator: a deposed leader that wakes up (SIGCONT after SIGSTOP) cannot commit
anything, whatever its clock says — its late writes fail with a fencing error and never
reach readers (they read committed records only). A candidate opens the writer only when
the lease it has read is expired, and re-reads the log to its end afterwards, before it
decides again (see ``leadership.py``).

:meth:`StateWriter.write` commits a batch of records atomically and returns only once the
store has read them back, so the caller's next snapshot includes them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from crossfeed.kafka import clients
from crossfeed.services.coordinator.store import StateStore
from crossfeed.wire import topics

log = logging.getLogger(__name__)

TRANSACTIONAL_ID = "crossfeed-coordinator"
"""Shared by every coordinator of a control cluster: opening a writer fences the others."""

Record = tuple[str, bytes | None]
"""(key, value) for ``_crossfeed.state``; a None value is a tombstone."""


class Fenced(Exception):
    """Another coordinator opened the writer: this one may never write again."""


class NotLeader(Exception):
    """The write was refused before it started: this coordinator does not lead now."""


class WriteFailed(Exception):
    """The write did not happen (or was not read back); it may be retried."""


class StateWriter:
    """Fenced, transactional writes to ``_crossfeed.state``, read back before returning."""

    def __init__(
        self, conf: dict[str, Any], store: StateStore, transaction_timeout_ms: int
    ) -> None:
        self._conf = conf
        self._store = store
        self._transaction_timeout_ms = transaction_timeout_ms
        self._producer: Producer | None = None
        self._lock = threading.RLock()  # one transaction at a time (tick and REST threads)

    @property
    def is_open(self) -> bool:
        return self._producer is not None

    def open(self, timeout_s: float = 10.0) -> None:
        """Take the writer: fences every other coordinator's, then reads the log to its end."""
        with self._lock:
            self.close()
            try:
                producer = clients.transactional_producer(
                    self._conf,
                    TRANSACTIONAL_ID,
                    init_timeout_s=timeout_s,
                    **{
                        "transaction.timeout.ms": self._transaction_timeout_ms,
                        "linger.ms": 0,
                        # Being fenced is expected here (a new leader): logged in our words.
                        "logger": clients.QUIET,
                    },
                )
            except KafkaException as err:
                raise WriteFailed(f"could not open the state writer: {err.args[0].str()}") from None
            if not self._store.sync(timeout_s):
                raise WriteFailed(f"could not read {topics.STATE} to its end in {timeout_s:.0f}s")
            self._producer = producer

    def close(self) -> None:
        """Drop the writer (a fenced or stale producer is simply let go)."""
        with self._lock:
            self._producer = None

    def write(
        self, records: Sequence[Record], guard: Callable[[], bool], timeout_s: float = 10.0
    ) -> None:
        """Commit ``records`` in one transaction if ``guard()`` holds right before; wait
        until the store has read them. Raises NotLeader, Fenced or WriteFailed."""
        if not records:
            return
        with self._lock:
            producer = self._producer
            if producer is None:
                raise NotLeader("this coordinator holds no state writer")
            if not guard():
                raise NotLeader("this coordinator does not hold a live lease")
            offsets: list[int] = []
            errors: list[str] = []

            def delivered(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    errors.append(err.str())
                else:
                    offsets.append(int(msg.offset() or 0))

            try:
                producer.begin_transaction()
                for key, value in records:
                    producer.produce(
                        topics.STATE, key=key.encode(), value=value, on_delivery=delivered
                    )
                producer.commit_transaction(timeout_s)
            except KafkaException as exc:
                self._fail(producer, exc.args[0])
            except BufferError as exc:
                self._abort(producer)
                raise WriteFailed(f"could not queue records: {exc}") from None
            if errors or not offsets:
                raise WriteFailed(f"write to {topics.STATE} not delivered: {errors}")
            if not self._store.wait_for(max(offsets) + 1, timeout_s):
                raise WriteFailed(f"write to {topics.STATE} not read back in {timeout_s:.0f}s")

    def _fail(self, producer: Producer, err: KafkaError) -> None:
        if clients.is_fenced(err):
            self.close()
            raise Fenced(f"fenced by another coordinator: {err.str()}") from None
        self._abort(producer)  # a failed commit leaves the transaction open or unknown
        raise WriteFailed(f"write to {topics.STATE} failed: {err.str()}") from None

    def _abort(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(5)
        except KafkaException as err:
            log.warning("could not abort the state transaction: %s", err.args[0].str())
            self.close()
