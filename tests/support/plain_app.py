"""A plain confluent-kafka application, as a process: ``python -m tests.support.plain_app
BOOTSTRAP GROUP TOPIC``. It subscribes, polls batches, prints ``<partition> <value>`` per
record and commits after every batch; SIGTERM closes it cleanly (the way application
code is written; only BOOTSTRAP differs between data centers)."""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer


def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # Killed with dc-a, it stays a member there until its session times out, and
            # failback waits for that: 10 s rather than the default 45 keeps the test short.
            "session.timeout.ms": 10_000,
        }
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer.subscribe([topic])
    while not stopping:
        batch = [m for m in consumer.consume(100, timeout=0.2) if m.error() is None]
        for msg in batch:
            sys.stdout.write(f"{msg.partition()} {(msg.value() or b'').decode()}\n")
        sys.stdout.flush()
        if batch:
            consumer.commit(asynchronous=False)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
