"""Waiting for something a test expects to happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll ``check()`` until it returns something truthy; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout}s")
        time.sleep(every)


COORDINATOR_NOT_READY = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)


def retry_retriable(call: Callable[[], Any], timeout: float, what: str) -> Any:
    """``call()`` again while Kafka answers with an error it calls retriable; returns its
    result. A cluster started moments ago loads its group coordinator after the first
    commit asks for it (COORDINATOR_LOAD_IN_PROGRESS): an application retries that, and a
    test that commits right after a cluster starts does the same."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            # librdkafka does not flag a commit's coordinator errors retriable (retriable()
            # is False for them), though Kafka documents them as retriable: named here.
            retriable = isinstance(error, KafkaError) and (
                error.retriable() or error.code() in COORDINATOR_NOT_READY
            )
            if not retriable or time.monotonic() > deadline:
                raise AssertionError(f"{what}: {exc}") from exc
            time.sleep(0.5)
