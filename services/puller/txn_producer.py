"""A task's transactional producer: its transactions begun, committed, and crossfeed's
own records written in them; librdkafka's errors come back as a :class:`TxnFailure`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from crossfeed.core.task_txn import Outcome
from crossfeed.kafka import clients
from crossfeed.kafka.protocols import TransactionalProducer

log = logging.getLogger(__name__)


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


class TaskProducer:
    def __init__(
        self, producer: TransactionalProducer, staging_partition: int, transactional_id: str
    ) -> None:
        self.producer = producer
        self.staging_partition = staging_partition
        self.transactional_id = transactional_id
        self.in_txn = False  # the producer's transaction has begun

    def produce(
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

    def begin(self) -> TxnFailure | None:
        if self.in_txn:
            return None
        failure = self._txn(self.producer.begin_transaction)
        self.in_txn = failure is None
        return failure

    def commit(self) -> TxnFailure | None:
        return self._txn(self.producer.commit_transaction, 60)

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

    def close(self, *, dead: bool) -> None:
        """Let the producer go. A task that ended in a failure (``dead``) drops what it
        still holds (its transaction is settled by the next owner's ``init_transactions``)."""
        try:
            if dead:
                self.producer.purge()
            clients.flush(self.producer, 5)
        except KafkaException as err:  # a fenced producer has nothing left to deliver
            log.info("task %d: producer closed (%s)", self.staging_partition, err)
