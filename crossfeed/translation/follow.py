"""Tails of compacted topics that outlive a lost cluster.

:class:`crossfeed.membership.TopicTail` gives up when its cluster does not answer at
start; a translator must not: ``__consumer_timestamps`` lives on the source cluster,
which is exactly the one that may be down (and may come back), and the topic may not
exist yet. A :class:`Follower` keeps trying, resumes from where it was, and folds every
record into a table under a lock the reader shares.

``__consumer_offsets`` is followed the same way, with three differences its use needs:
binary keys (``raw_keys``), a topic that must be readable before the follower counts as
caught up (``required``: a missing or unauthorized topic is a :attr:`Follower.problem`
the translator reports, and it lists group offsets meanwhile), and a callback after
every batch (``on_batch``) with a short batch wait, so commits are translated as they
arrive rather than at the next round.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Generic, Protocol, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from crossfeed.kafka import clients
from crossfeed.translation.books import RecordedBook, StampBook, SyncBook
from crossfeed.translation.commit_log import TOPIC as CONSUMER_OFFSETS
from crossfeed.translation.commit_log import CommitBook
from crossfeed.translation.kafka_io import QUIET_CONF
from crossfeed.wire import topics

log = logging.getLogger(__name__)

RETRY_S: Final = 2.0
LOOK_S: Final = 10.0
BATCH_WAIT_S: Final = 0.2
COMMITS_BATCH_WAIT_S: Final = 0.05
"""A batch of commits is handed on at most this long after its first record arrived."""
_DENIED: Final = (
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
)
_LOST: Final = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)
"""librdkafka reports a lost cluster as message errors, not exceptions."""


class Book(Protocol):
    def apply(self, key: Any, value: bytes | None) -> None: ...


T = TypeVar("T", bound=Book)


class Follower(Generic[T]):
    """Reads every partition of ``topic`` from its start, forever, into ``book``."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        topic: str,
        book: T,
        name: str,
        *,
        raw_keys: bool = False,
        required: bool = False,
        on_batch: Callable[[], None] | None = None,
        batch_wait_s: float = BATCH_WAIT_S,
    ) -> None:
        self.conf = dict(conf)
        self.topic = topic
        self.book = book
        self.name = name
        self.raw_keys = raw_keys
        self.required = required
        self.on_batch = on_batch
        self.batch_wait_s = batch_wait_s
        self.lock = threading.RLock()
        self.caught_up = threading.Event()
        """Set once everything that existed when the tail (re)started was read; also when
        the topic does not exist (there is nothing to read) unless it is ``required``."""
        self.problem: str | None = None
        """Why the topic cannot be read now (None while it is read)."""
        self.missing = False
        """The topic was not there at the last look (looked at again every RETRY_S)."""
        self.read_at_ms = -1
        """Wall-clock time of the last batch read without error (-1: none yet), an empty
        one too: records written before then, up to a fetch round trip, were read. A
        broker lost meanwhile is noticed only when librdkafka reports it, so this can be
        a moment late."""
        self._apply: Callable[[Any, bytes | None], None] = book.apply
        self._next: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Follower[T]:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @contextmanager
    def locked(self) -> Iterator[T]:
        """The book, with the tail held off while the caller reads it."""
        with self.lock:
            yield self.book

    def wait(self, timeout_s: float) -> bool:
        return self.caught_up.wait(timeout_s)

    def wait_read_to_end(self, timeout_s: float) -> bool:
        """Wait until every record the topic holds now is in the book: its end offsets are
        asked for first (a consumer of its own), then the tail's positions must reach
        them. True at once when the topic does not exist; False on timeout, or when the
        cluster does not give its end offsets.

        Ends, not a time: a batch read after some instant says nothing of a fetch still
        on its way, and on a loaded machine that fetch held the last recorded commits."""
        if self.missing:
            return True
        deadline = time.monotonic() + timeout_s
        try:
            ends = self._end_offsets(timeout_s)
        except KafkaException as err:
            log.warning("%s: no end offsets of %s: %s", self.name, self.topic, err)
            return False
        while True:
            with self.lock:
                behind = [
                    p for p, (low, high) in ends.items() if high > max(low, self._next.get(p, low))
                ]
            if not behind:
                return True
            if time.monotonic() >= deadline:
                return False
            self._stop.wait(0.01)

    def _end_offsets(self, timeout_s: float) -> dict[int, tuple[int, int]]:
        """(low, high) watermark of every partition of the topic, asked now."""
        consumer = self._consumer("ends-")
        try:
            info = consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
            if info is None or info.error is not None:
                return {}
            return self._marks(consumer, sorted(info.partitions), timeout_s)
        finally:
            consumer.close()

    def _consumer(self, role: str = "") -> Any:
        """A consumer of this tail's cluster, in a group of its own (nothing is committed)."""
        group = f"crossfeed-{self.name}-{role}{os.getpid()}-{uuid.uuid4().hex[:6]}"
        return clients.consumer(self.conf, **QUIET_CONF, **{"group.id": group})

    def _marks(
        self, consumer: Any, parts: list[int], timeout_s: float
    ) -> dict[int, tuple[int, int]]:
        """(low, high) watermark of each of ``parts``, asked now."""
        return {
            p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout_s)
            for p in parts
        }

    def _run(self) -> None:
        complained = False
        while not self._stop.is_set():
            consumer = self._consumer()
            try:
                self._follow(consumer)
                complained = False
            except KafkaException as err:
                self.problem = f"cannot read {self.topic}: {err}"
                if not complained:
                    log.warning(
                        "%s: cannot read %s on %s (%s); retrying every %.0fs",
                        self.name,
                        self.topic,
                        self.conf.get("bootstrap.servers"),
                        err,
                        RETRY_S,
                    )
                    complained = True
            finally:
                consumer.close()
            self._stop.wait(RETRY_S)

    def _follow(self, consumer: Any) -> None:
        meta = consumer.list_topics(self.topic, timeout=5)
        info = meta.topics.get(self.topic)
        self.missing = info is None or info.error is not None or not info.partitions
        if self.missing:
            if self.required:
                # Not caught up: there is nothing to follow (the topic appears with the
                # cluster's first group commit) or no right to read it; say which.
                why = info.error.str() if info is not None and info.error else "no partitions"
                self.problem = f"{self.topic}: {why}"
            else:
                self.caught_up.set()  # nothing to read yet; look again later
            return
        parts = sorted(info.partitions)
        # (low, high) per partition: a partition whose records were all deleted or
        # compacted away has nothing to read, and no record would ever move its position.
        marks = self._marks(consumer, parts, 5)
        consumer.assign(
            [TopicPartition(self.topic, p, self._next.get(p, OFFSET_BEGINNING)) for p in parts]
        )
        next_look = time.monotonic() + LOOK_S
        while not self._stop.is_set():
            batch: list[Any] = consumer.consume(1000, timeout=self.batch_wait_s)
            applied = False
            trouble: str | None = None
            with self.lock:
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() in _DENIED:
                            self.problem = f"{self.topic}: {err.str()}"
                            return  # looked at again every RETRY_S
                        if err.code() in _LOST:
                            trouble = f"cannot read {self.topic}: {err.str()}"
                        continue
                    raw = msg.key() or b""
                    key = raw if self.raw_keys else raw.decode("utf-8", "replace")
                    try:
                        self._apply(key, msg.value())
                        applied = True
                    except ValueError as err:  # a value we cannot decode: skip it, say so
                        log.warning(
                            "%s: skipping %s record %r at %d/%d: %s",
                            self.name,
                            self.topic,
                            key,
                            msg.partition(),
                            msg.offset(),
                            err,
                        )
                    self._next[msg.partition()] = msg.offset() + 1
                self.problem = trouble
                if trouble is None:
                    self.read_at_ms = int(time.time() * 1000)
            # The consumer's positions, not the last record's offset + 1: a transaction's
            # commit marker takes an offset too, and no record would ever step past it.
            positions = consumer.position([TopicPartition(self.topic, p) for p in parts])
            with self.lock:
                for tp in positions:
                    if tp.offset >= 0:
                        self._next[tp.partition] = max(tp.offset, self._next.get(tp.partition, 0))
            if not self.caught_up.is_set() and all(
                tp.offset >= marks[tp.partition][1]
                or marks[tp.partition][1] <= marks[tp.partition][0]
                for tp in positions
            ):
                self.caught_up.set()
            if applied and self.on_batch is not None:
                self.on_batch()
            if time.monotonic() >= next_look:
                # Raises while the cluster is down (the caller reconnects); returns to assign
                # again when partitions were added.
                now = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
                if now is None or len(now.partitions) != len(parts):
                    return
                next_look = time.monotonic() + LOOK_S


def follow_syncs(target_conf: Mapping[str, Any]) -> Follower[SyncBook]:
    """A started tail of ``_crossfeed.offset-syncs`` on one target cluster."""
    return Follower(target_conf, topics.OFFSET_SYNCS, SyncBook(), "offset-syncs").start()


def follow_stamps(source_conf: Mapping[str, Any]) -> Follower[StampBook]:
    """A started tail of ``__consumer_timestamps`` on one source cluster."""
    return Follower(source_conf, topics.CONSUMER_TIMESTAMPS, StampBook(), "consumer-ts").start()


def follow_recorded(target_conf: Mapping[str, Any]) -> Follower[RecordedBook]:
    """A started tail of ``_crossfeed.consumer-timestamps`` on one target cluster: the
    commits the client library's opt-in recorded there (short batches: a failover waits
    for what was written just before it)."""
    return Follower(
        target_conf,
        topics.DESTINATION_TIMESTAMPS,
        RecordedBook(),
        "recorded-commits",
        batch_wait_s=COMMITS_BATCH_WAIT_S,
    ).start()


def follow_commits(
    source_conf: Mapping[str, Any],
    book: CommitBook,
    on_batch: Callable[[], None] | None = None,
    topic: str = CONSUMER_OFFSETS,
) -> Follower[CommitBook]:
    """A started tail of ``__consumer_offsets`` on one source cluster (``topic``: another
    name only in tests of the fallback)."""
    return Follower(
        source_conf,
        topic,
        book,
        "consumer-offsets",
        raw_keys=True,
        required=True,
        on_batch=on_batch,
        batch_wait_s=COMMITS_BATCH_WAIT_S,
    ).start()
