"""The change producer: row changes, commit timestamps, transactions, resolved watermarks.

docs/ordered-feeds.md §1 is the contract. Every change carries its commit timestamp
(``crossfeed-commit-ts``, microseconds) and, when it belongs to a transaction of several
changes, ``crossfeed-txn`` = ``<txn id>/<seq>/<count>``; and the producer promises, per
partition, "nothing with a commit_ts ≤ T will follow" by writing a ``resolved`` watermark
(header ``crossfeed-type: resolved`` and ``crossfeed-commit-ts: T``, an Avro
``ResolvedMark`` whose ``next_offset`` is -1 and ``source_cluster`` empty: the producer
knows neither).

The promise holds because this producer hands out commit timestamps itself, strictly
increasing, and refuses to write a change at or below a watermark it already wrote; a
lock keeps a watermark behind every change stamped before it (one producer may be used
from several threads, and by its ticker). One producer per partition of changes (one
writer per table, say): a watermark speaks for the producer that wrote it only.

Row changes: :func:`row_change` wraps a :class:`~crossfeed.wire.changes.ChangeEvent` (built
with :class:`~crossfeed.wire.changes.Table`) into a :class:`Change`; bytes column values
are plain ``bytes`` (the Avro ``Binary`` wrapping is done here).

Watermarks at an interval (``resolved_interval_s``; None, the default, writes them only
when :meth:`ChangeProducer.resolved` is called), idle partitions included, for every
topic this producer wrote or :meth:`ChangeProducer.watch`-es, in either of two ways:

* :meth:`ChangeProducer.tick` — call it from your own loop as often as you like; it writes
  a round of watermarks when the interval has passed (the bank workload does this);
* :meth:`ChangeProducer.start_ticker` (or ``with ChangeProducer(...) as producer:``) — a
  background thread calls ``tick`` for you, so an application that sits idle still
  advances the feed.

A round's watermark is the newest commit_ts, or the clock when that is later — unless a
caller ever passed its own ``commit_ts_us``: then only the newest commit_ts, so that the
clock never fences timestamps the caller hands out. With an interval set, before its
first change to a topic the producer writes a watermark to every partition of it (at the
last resolved ts), so the puller knows from the start that the partitions follow
watermarks, not record timestamps (docs/ordered-feeds.md §2).

**A producer that stops leaves nothing pending.** :meth:`ChangeProducer.close` (the end of
``with ChangeProducer(...)``, or the interpreter's clean exit for a producer still open)
of a producer that writes watermarks ends with a last round of them, marked
``crossfeed-watermark: final``: every partition of every topic it wrote or watched is
resolved up to its newest commit_ts (or the clock, as for a round), so the sorter
releases the last transactions at once instead of waiting for a watermark that will never
come; from then on the puller moves those partitions with its clock (as for partitions
without watermarks), so a topic whose producer is gone holds no other topic of the feed
back. A partition's watermarks speak for one producer:
producers that follow each other on a topic (a batch job run every night) are fine, each
one's changes above the last one's final watermark (the clock moves on between them);
producers writing one topic at the same time are not — give each its own topic (a feed
reads several) (docs/ordered-feeds.md §1).

With a transactional config (``transactional.id``) every :meth:`ChangeProducer.transaction`
is also a Kafka transaction, so a source transaction is never half visible on the source
either; without one (idempotent only: per-partition order, no duplicates) transactions
are much cheaper and the feed still applies them whole (the sorter waits for all
``count`` changes).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, Producer

from crossfeed.kafka import clients
from crossfeed.wire import headers, records
from crossfeed.wire.changes import ChangeEvent, check_txn_id, encode_change, txn_header

Header = tuple[str, bytes | None]
FINAL_HEADER: Header = (headers.WATERMARK, headers.WATERMARK_FINAL.encode())


@dataclass(frozen=True, slots=True)
class Change:
    """One record of a transaction."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: Sequence[Header] = ()


class Outgoing(NamedTuple):
    """One record on its way to Kafka (a change or a watermark), fully stamped."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class ProduceError(RuntimeError):
    """Kafka refused records of this producer (delivery failed)."""


def message_key(event: ChangeEvent) -> bytes | None:
    """The default Kafka key of a row change: the primary-key value as text (bytes as they
    are) for a one-column key, a JSON array of the values (bytes in hex) for a composite
    one, None for a ddl."""
    values = list(event.key.values())
    if not values:
        return None
    if len(values) == 1:
        v = values[0]
        return bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode()
    return json.dumps([v.hex() if isinstance(v, bytes) else v for v in values]).encode()


def row_change(
    topic: str,
    event: ChangeEvent,
    *,
    key: bytes | None = None,
    partition: int | None = None,
    headers: Sequence[Header] = (),
) -> Change:
    """A :class:`Change` whose value is ``event`` as an Avro ``ChangeEvent``; the Kafka key
    defaults to :func:`message_key` (so a row's changes share a partition)."""
    return Change(topic, encode_change(event), key or message_key(event), partition, headers)


def watermark_value(topic: str, partition: int, ts_us: int) -> bytes:
    """A watermark's ResolvedMark: no source cluster and no position (-1) of its own."""
    return records.resolved_mark(
        source_cluster="", topic=topic, partition=partition, resolved_ts_us=ts_us, next_offset=-1
    )


def iter_stamped(changes: Sequence[Change], txn: str, ts_us: int) -> Iterator[Outgoing]:
    """The records of one source transaction, one at a time (a transaction of a million
    changes is never all in memory): every change with ``crossfeed-commit-ts`` (any earlier
    one replaced) and, when there are several, ``crossfeed-txn``."""
    check_txn_id(txn)
    count = len(changes)
    ts = str(ts_us).encode()
    for seq, change in enumerate(changes, start=1):
        stamped = [
            *(h for h in change.headers if h[0] not in (headers.COMMIT_TS, headers.TXN)),
            (headers.COMMIT_TS, ts),
        ]
        if count > 1:
            stamped.append((headers.TXN, txn_header(txn, seq, count)))
        yield Outgoing(change.topic, change.partition, change.key, change.value, stamped)


def stamp_transaction(changes: Sequence[Change], txn: str, ts_us: int) -> list[Outgoing]:
    """:func:`iter_stamped` as a list."""
    return list(iter_stamped(changes, txn, ts_us))


def _now_us() -> int:
    return int(time.time() * 1_000_000)


class ChangeProducer:
    """Produces changes with commit timestamps and writes resolved watermarks."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        resolved_interval_s: float | None = None,
        topics: Iterable[str] = (),
    ) -> None:
        self.transactional = "transactional.id" in config
        self._producer = Producer(
            clients.logged(
                {
                    "enable.idempotence": True,
                    "delivery.report.only.error": True,
                    "on_delivery": self._on_delivery,
                    **config,
                },
                "producer",
            )
        )
        if self.transactional:
            self._producer.init_transactions(30)
        self.resolved_interval_s = resolved_interval_s
        self._lock = threading.RLock()
        self._last_ts_us = 0
        self._resolved_us = 0
        self._explicit_ts = False  # a caller passed commit_ts_us: ticks never use the clock
        self._written: set[str] = set()
        self._announced: set[str] = set()  # topics whose partitions got a first watermark
        self._watched: set[str] = set(topics)
        self._last_tick = 0.0
        self._errors: list[str] = []
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self.ticker_error: BaseException | None = None
        self._closed = False
        _OPEN.add(self)

    # -- timestamps ----------------------------------------------------------------------

    @property
    def last_commit_ts_us(self) -> int:
        """The newest commit_ts handed out (0 before the first transaction)."""
        return self._last_ts_us

    @property
    def resolved_ts_us(self) -> int:
        """The newest watermark written (0 before the first)."""
        return self._resolved_us

    def _next_ts(self, requested: int | None) -> int:
        """The commit timestamp of the next transaction: the one asked for (above the last
        watermark), else the clock, kept above every earlier one."""
        if requested is not None:
            if requested <= self._resolved_us:
                raise ValueError(
                    f"commit_ts {requested} is at or below the resolved watermark "
                    f"{self._resolved_us} this producer already wrote"
                )
            self._explicit_ts = True
            ts = requested
        else:
            ts = max(_now_us(), self._last_ts_us + 1, self._resolved_us + 1)
        self._last_ts_us = max(self._last_ts_us, ts)
        return ts

    # -- changes -------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        commit_ts_us: int | None = None,
    ) -> int:
        """One change, a transaction of its own; returns its commit_ts (µs)."""
        return self.transaction([Change(topic, value, key, partition, headers)], commit_ts_us)[1]

    def transaction(
        self,
        changes: Sequence[Change],
        commit_ts_us: int | None = None,
        txn_id: str | None = None,
    ) -> tuple[str, int]:
        """Write ``changes`` as one source transaction (one commit_ts, ``crossfeed-txn``
        on each when there are several); returns (txn id, commit_ts µs).

        A txn id is non-empty printable ASCII without spaces, '/' or ':' (default: a
        random hex id).
        """
        if not changes:
            raise ValueError("a transaction needs at least one change")
        txn = check_txn_id(txn_id) if txn_id is not None else uuid.uuid4().hex
        announce = self.resolved_interval_s is not None
        with self._lock, self._kafka_transaction():
            if announce:  # a new topic's first watermarks, delivered before its first change
                topics = dict.fromkeys(change.topic for change in changes)
                new = [topic for topic in topics if topic not in self._announced]
                for topic in new:
                    self._marks(topic, self._resolved_us)
                if new:
                    clients.flush(self._producer, 30)
            # ... and the commit_ts taken after them: a slow metadata answer or a producer
            # id still being fetched (seconds on a loaded broker) must not age the change,
            # or a puller that follows the clock for the still-empty new partitions
            # (lateness.ms) would find it late.
            ts = self._next_ts(commit_ts_us)
            for record in iter_stamped(changes, txn, ts):
                self._write(record)
        return txn, ts

    # -- watermarks ----------------------------------------------------------------------

    def watch(self, topics: Iterable[str]) -> None:
        """Also write the interval's watermarks to ``topics`` (before any change to them)."""
        with self._lock:
            self._watched.update(topics)

    def resolved(
        self, topics: Iterable[str] | None = None, ts_us: int | None = None, *, final: bool = False
    ) -> int:
        """Write a watermark to every partition of ``topics`` (default: every topic this
        producer wrote or watches); returns the resolved ts (µs), by default the newest
        commit_ts.

        After it, this producer refuses changes with a commit_ts at or below it. ``final``:
        the producer is done with these topics (``crossfeed-watermark: final``; see
        :meth:`final_marks`).
        """
        with self._lock:
            ts = self._last_ts_us if ts_us is None else ts_us
            if ts < self._resolved_us:
                raise ValueError(
                    f"resolved ts {ts} is below the one already written ({self._resolved_us})"
                )
            if ts_us is not None and ts_us < self._last_ts_us:
                raise ValueError(
                    f"resolved ts {ts_us} is below commit_ts {self._last_ts_us} already written"
                )
            names = sorted(set(topics) if topics is not None else self._written | self._watched)
            self._write_marks(names, ts, final)
            self._resolved_us = ts
            return ts

    def tick(self, now: float | None = None) -> int | None:
        """Write a round of watermarks if ``resolved_interval_s`` has passed since the last
        one; returns its resolved ts, or None if it was not due (or had nothing to say).
        Also serves delivery reports. Cheap: call it from any loop."""
        self._producer.poll(0)
        now = time.monotonic() if now is None else now
        if self.resolved_interval_s is None or now - self._last_tick < self.resolved_interval_s:
            return None
        with self._lock:
            self._last_tick = now
            ts = self._last_ts_us
            if not self._explicit_ts:
                ts = max(ts, _now_us())
            names = self._written | self._watched
            if not names or (ts <= self._resolved_us and names <= self._announced):
                return None
            return self.resolved(names, max(ts, self._resolved_us))

    def start_ticker(self) -> ChangeProducer:
        """Call :meth:`tick` from a background thread every ``resolved_interval_s`` until
        :meth:`close`; an error it meets is kept in ``ticker_error`` and raised by close."""
        if self.resolved_interval_s is None:
            raise ValueError("start_ticker needs resolved_interval_s")
        if self._ticker is None:
            self._stop.clear()
            self._ticker = threading.Thread(
                target=self._tick_loop, name="crossfeed-watermarks", daemon=True
            )
            self._ticker.start()
        return self

    def _tick_loop(self) -> None:
        while not self._stop.wait(min(self.resolved_interval_s or 1.0, 0.1)):
            try:
                self.tick()
            except BaseException as err:  # kept for close(); the thread ends
                self.ticker_error = err
                return

    def _write_marks(self, names: Sequence[str], ts: int, final: bool = False) -> None:
        """One watermark at ``ts`` per partition of each topic in ``names`` (lock held)."""
        if not names:
            return
        with self._kafka_transaction():
            for topic in names:
                self._marks(topic, ts, final)

    def _marks(self, topic: str, ts: int, final: bool = False) -> None:
        """One watermark at ``ts`` per partition of ``topic`` (lock held, in a Kafka
        transaction if the producer is transactional); ``final`` ones say the producer
        closed."""
        meta = self._producer.list_topics(topic, timeout=10).topics[topic]
        if getattr(meta, "error", None) is not None:
            raise ProduceError(f"topic {topic}: {meta.error}")
        for partition in sorted(meta.partitions):
            value = watermark_value(topic, partition, ts)
            hdrs: list[Header] = records.resolved_mark_headers(ts)
            if final:
                hdrs.append(FINAL_HEADER)
            self._write(Outgoing(topic, partition, None, value, hdrs))
        self._announced.add(topic)

    @contextlib.contextmanager
    def _kafka_transaction(self) -> Iterator[None]:
        """With a transactional config, what the block writes is one Kafka transaction
        (aborted if the block raises); without one, nothing more than the block."""
        if not self.transactional:
            yield
            return
        clients.served(self._producer.begin_transaction)
        try:
            yield
            clients.served(self._producer.commit_transaction, 30)
        except Exception as err:
            clients.abort_after(self._producer, err, 30)
            raise

    # -- I/O -----------------------------------------------------------------------------

    def _write(self, record: Outgoing) -> None:
        """Hand one stamped record to Kafka (subclasses may hold some back, in order)."""
        self._produce(record)

    def _produce(self, record: Outgoing) -> None:
        partition = -1 if record.partition is None else record.partition  # -1: partitioner
        clients.produce_copy(
            self._producer,
            record.topic,
            record.value,
            record.key,
            partition,
            None,  # delivery errors go to the producer-wide _on_delivery
            0,  # timestamp: now
            list(record.headers),
        )
        self._written.add(record.topic)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(self._errors) < 100:
            self._errors.append(f"{msg.topic()}/{msg.partition()}: {err.str()}")

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for delivery; returns how many records are still queued. Raises
        ProduceError if Kafka refused any record since the producer started."""
        left = clients.flush(self._producer, timeout_s)
        if self._errors:
            raise ProduceError(
                f"{len(self._errors)} record(s) were not delivered, e.g. {self._errors[0]}"
            )
        return left

    def final_marks(self) -> int | None:
        """The last round of watermarks a producer that stops writes (module doc): every
        partition of every topic it wrote or watched, resolved up to its newest commit_ts
        (or the clock, unless a caller handed out commit_ts itself), each marked
        ``crossfeed-watermark: final`` so that the puller follows the clock from then on
        (an idle partition then holds no other partition back). Only for a producer
        that writes watermarks (an interval, or :meth:`resolved` called): one that never
        did leaves its partitions to the puller's record timestamps. Returns the resolved
        ts written, None if there was nothing to write."""
        with self._lock:
            if self.resolved_interval_s is None and not self._announced:
                return None
            names = self._written | self._watched
            ts = self._last_ts_us if self._explicit_ts else max(self._last_ts_us, _now_us())
            if not names:
                return None
            return self.resolved(names, max(ts, self._resolved_us), final=True)

    def close(self) -> None:
        """Stop the ticker, write the final watermarks (:meth:`final_marks`) and wait for
        delivery (raises what the ticker met). Closing twice does nothing more."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if not self._closed:
            self._closed = True
            _OPEN.discard(self)
            if self.ticker_error is None:
                self.final_marks()
        self.flush()
        if self.ticker_error is not None:
            raise ProduceError(f"watermark ticker failed: {self.ticker_error}")

    def __enter__(self) -> ChangeProducer:
        return self if self.resolved_interval_s is None else self.start_ticker()

    def __exit__(self, *exc: object) -> None:
        self.close()


_OPEN: weakref.WeakSet[ChangeProducer] = weakref.WeakSet()
"""Producers not closed yet: a clean interpreter exit closes them (module doc)."""


@atexit.register
def _close_open_producers() -> None:
    for producer in list(_OPEN):
        try:
            producer.close()
        except Exception as err:  # exiting: say it, never raise from atexit
            print(f"crossfeed: closing a ChangeProducer at exit failed: {err}", file=sys.stderr)
