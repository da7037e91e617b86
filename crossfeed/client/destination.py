"""The opt-in of :class:`~crossfeed.client.consumer.TimestampedConsumer`: every commit is
also recorded on the destination cluster, so a failover knows the group's last commit
even when the source never answers again (zero records read again after ``kill -9``).

Configured with keys prefixed ``timestamps.destination.``:

* ``timestamps.destination.bootstrap.servers`` — the destination cluster (the feed's
  target); setting it turns the opt-in on. Any other ``timestamps.destination.<key>`` is
  a producer setting for that cluster (credentials: ``sasl.*``, ``ssl.*``,
  ``security.protocol``); nothing is inherited from the consumer, which talks to another
  cluster.
* ``timestamps.destination.wait.ms`` (default 1000) — how long a commit waits, at most,
  until its record is acknowledged by the destination (``acks=all``). 0: never wait (the
  record is sent in the background; a source lost right after may take the last commits'
  records with it).

The record is the ``ConsumerTimestamp`` of the commit, written to
``_crossfeed.consumer-timestamps`` on the destination, keyed
``<source cluster.id>/<group>/<topic>/<partition>`` (compacted: the newest per key).
It is written *after* the commit succeeded on the source: a record never claims a commit
the source refused (that would skip records), and a commit that succeeded is on the
destination before ``commit()`` returns, unless the wait ran out.

When the destination does not answer, the commit itself is not affected: the wait runs
out (logged once, counted in ``waits_expired``), records queue in the producer and go
out when it answers again, and until one is acknowledged again commits stop waiting — a
destination that is down costs one ``wait.ms``, not one per commit. Records the producer
gives up on (its ``message.timeout.ms``, 5 minutes by default) or cannot queue are logged
and counted in ``failed``; the next commit records a newer offset anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from crossfeed.client.connection import connection_settings, create_topic
from crossfeed.wire import topics

PREFIX: Final = "timestamps.destination."
WAIT_KEY, DEFAULT_WAIT_MS = "wait.ms", 1000
# Creating the topic waits this long at most, and is tried again at most this often.
CREATE_TIMEOUT_S, CREATE_RETRY_S = 5.0, 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DestinationSettings:
    producer: dict[str, Any]
    wait_s: float


def split_destination(
    config: Mapping[str, Any],
) -> tuple[dict[str, Any], DestinationSettings | None]:
    """(the config without the opt-in's keys, the opt-in's settings or None when off).
    ValueError for a bad wait or settings without a destination."""
    rest: dict[str, Any] = {}
    mine: dict[str, Any] = {}
    for key, value in config.items():
        if key.startswith(PREFIX):
            mine[key[len(PREFIX) :]] = value
        else:
            rest[key] = value
    if not mine:
        return rest, None
    if not mine.get("bootstrap.servers"):
        raise ValueError(
            f"{PREFIX}bootstrap.servers is needed with {sorted(PREFIX + k for k in mine)}: "
            "the cluster the feed copies into, where each commit is recorded"
        )
    raw_wait = mine.pop(WAIT_KEY, DEFAULT_WAIT_MS)
    whole = isinstance(raw_wait, int) or (isinstance(raw_wait, str) and raw_wait.isdigit())
    wait_ms = int(raw_wait) if whole and not isinstance(raw_wait, bool) else -1
    if wait_ms < 0:
        raise ValueError(
            f"{PREFIX}{WAIT_KEY} must be a whole number of milliseconds >= 0 (0: do not "
            f"wait), got {raw_wait!r}"
        )
    # Small records a commit waits for: sent at once, and not held back by Nagle's
    # algorithm (with it, a wait took 20 ms more at the median on the local stack).
    defaults = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "socket.nagle.disable": True,
    }
    return rest, DestinationSettings({**defaults, **mine}, wait_ms / 1000)


class DestinationRecorder:
    """Writes a group's commits to the destination and waits for them (bounded)."""

    def __init__(self, settings: DestinationSettings, partitions: int, replication: int) -> None:
        self.wait_s = settings.wait_s
        self.partitions = partitions
        self.replication = replication
        self.bootstrap = str(settings.producer["bootstrap.servers"])
        admin_conf = connection_settings(settings.producer)
        # Both kept for the consumer's life (see consumer._Recorder: a client destroyed
        # on a librdkafka thread aborts the process).
        # librdkafka's own complaints (a destination down) go to this module's logger.
        logged: dict[str, Any] = {"logger": log}
        self.admin = AdminClient({**logged, **admin_conf})
        self.producer = Producer({**logged, **settings.producer})
        self._lock = threading.Lock()
        self.stats = {"recorded": 0, "failed": 0, "waits_expired": 0}
        self.answering = True
        """False after a wait ran out, until a record is acknowledged again."""
        self.topic_ready = False
        self._created_at = -CREATE_RETRY_S
        self.ensure_topic()

    def ensure_topic(self) -> bool:
        """Create the compacted topic if missing (tried at most every CREATE_RETRY_S)."""
        if self.topic_ready:
            return True
        if time.monotonic() - self._created_at < CREATE_RETRY_S:
            return False
        self._created_at = time.monotonic()
        topic = NewTopic(
            topics.DESTINATION_TIMESTAMPS,
            num_partitions=self.partitions,
            replication_factor=self.replication,
            config=topics.internal_config(topics.DESTINATION_TIMESTAMPS),
        )
        self.topic_ready = create_topic(self.admin, topic, CREATE_TIMEOUT_S, self)
        return self.topic_ready

    def record(self, key: str, value: bytes) -> None:
        """Queue one commit's record (call :meth:`wait` after the commit's records)."""
        self.ensure_topic()  # produced either way: the topic may exist already
        try:
            self.producer.produce(
                topics.DESTINATION_TIMESTAMPS,
                key=key.encode(),
                value=value,
                on_delivery=self._delivered,
            )
        except (BufferError, KafkaException) as err:
            self.count("failed")
            log.warning("commit %s not recorded on %s: %s", key, self, err)

    def wait(self) -> None:
        """Wait until every queued record is acknowledged, at most ``wait.ms``; not at all
        while the destination does not answer."""
        if self.wait_s <= 0 or not self.answering:
            self.producer.poll(0)
            return
        if self.producer.flush(self.wait_s) > 0:
            self.count("waits_expired")
            self.answering = False
            log.warning(
                "%s did not acknowledge a recorded commit within %.0f ms; commits go on "
                "without waiting until it answers (a failover meanwhile may re-read records)",
                self,
                self.wait_s * 1000,
            )

    def poll(self) -> None:
        self.producer.poll(0)

    def close(self, timeout_s: float) -> None:
        self.producer.flush(min(timeout_s, max(self.wait_s, 0.1)))

    def _delivered(self, err: Any, msg: Message) -> None:
        if err is not None:
            self.count("failed")
            log.warning("commit %s not recorded on %s: %s", _key(msg), self, err)
            return
        self.count("recorded")
        if not self.answering:
            log.info("%s acknowledges recorded commits again", self)
            self.answering = True

    def count(self, what: str) -> None:
        with self._lock:  # delivery reports may come from flush() on another thread
            self.stats[what] += 1

    def __str__(self) -> str:
        return f"the destination {self.bootstrap}"


def _key(msg: Message) -> str:
    raw = msg.key()
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
