"""Deterministic workloads for replication tests, produced with confluent-kafka.

:func:`produce_mixed` writes a seeded mix of everything a replicator must carry
faithfully (header lists with duplicate names and None values, null keys, tombstones,
empty keys/values, explicit partitions and timestamps) through three producers at once:
a plain idempotent one, a transactional one whose transactions commit, and a
transactional one whose transactions abort, interleaved so that aborted records sit
between committed ones in the same partitions. It returns exactly the committed records,
with the offsets and timestamps the brokers assigned (from delivery reports).

:class:`ContinuousProducer` produces numbered records from a background thread at a
steady rate until stopped (active-active tests: both sides produce while replicating).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from crossfeed.kafka import clients
from tests.support.verify import Header, Record

ProducedRecord = Record
"""What a producer had acknowledged: topic, partition, offset, key, value, headers,
timestamp_ms (see :class:`tests.support.verify.Record`)."""

FAST = {
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}


@dataclass(frozen=True, slots=True)
class _Spec:
    """One record to produce (before the broker placed it)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int | None


class _Recorder:
    """Delivery reports of one producer, by produce sequence number."""

    __slots__ = ("errors", "placed")

    def __init__(self) -> None:
        self.placed: dict[int, tuple[int, int, int]] = {}  # seq -> (partition, offset, ts)
        self.errors: list[str] = []

    def callback(self, seq: int) -> Callable[[KafkaError | None, Any], None]:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"record #{seq}: {err}")
            else:
                self.placed[seq] = (msg.partition(), msg.offset(), msg.timestamp()[1])

        return on_delivery


def _produce(producer: Producer, spec: _Spec, on_delivery: Callable[..., None]) -> None:
    kwargs: dict[str, Any] = {"key": spec.key, "value": spec.value, "on_delivery": on_delivery}
    if spec.headers:
        kwargs["headers"] = list(spec.headers)
    if spec.partition is not None:
        kwargs["partition"] = spec.partition
    if spec.timestamp_ms is not None:
        kwargs["timestamp"] = spec.timestamp_ms
    while True:
        try:
            producer.produce(spec.topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)


class _Generator:
    """The seeded stream of record specs."""

    def __init__(
        self, seed: int, topics: Sequence[str], partitions: int, now_ms: int, value_bytes: int
    ) -> None:
        self.rng = random.Random(seed)
        self.topics = list(topics)
        self.partitions = partitions
        self.now_ms = now_ms
        self.value_bytes = value_bytes
        self.n = 0

    def headers(self) -> tuple[Header, ...]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.35:
            return ()
        if roll < 0.45:  # duplicate names, order matters, one None value
            return (("dup", b"first"), ("n", str(self.n).encode()), ("dup", None), ("dup", b"3"))
        out: list[Header] = [("n", str(self.n).encode())]
        for _ in range(rng.randrange(0, 3)):
            kind = rng.randrange(4)
            if kind == 0:
                out.append(("none", None))
            elif kind == 1:
                out.append(("empty", b""))
            elif kind == 2:
                out.append(("bin", rng.randbytes(rng.randrange(1, 16))))
            else:
                out.append(("utf8", "héllo wörld ✓".encode()))
        return tuple(out)

    def next(self) -> _Spec:
        rng = self.rng
        self.n += 1
        topic = self.topics[rng.randrange(len(self.topics))]
        roll = rng.random()
        if roll < 0.10:
            key: bytes | None = None
        elif roll < 0.11:
            key = b""
        else:
            key = b"key-%d" % rng.randrange(500)
        roll = rng.random()
        if roll < 0.05:
            value: bytes | None = None  # tombstone
        elif roll < 0.06:
            value = b""
        else:
            size = rng.randrange(self.value_bytes // 2, self.value_bytes * 3 // 2 + 1)
            value = b"v%d|" % self.n + rng.randbytes(size)
        # Explicit partition for half of the records (and for every null key, whose
        # placement would otherwise be random); the rest go by key hash.
        partition = rng.randrange(self.partitions) if key is None or rng.random() < 0.5 else None
        timestamp = self.now_ms - rng.randrange(1, 3_600_000) if rng.random() < 0.3 else None
        return _Spec(topic, partition, key, value, self.headers(), timestamp)


def produce_mixed(
    config: dict[str, Any],
    topics: Sequence[str],
    partitions: int,
    n_records: int,
    *,
    seed: int,
    abort_every: int | None = 3,
    chunk: int = 2000,
    value_bytes: int = 100,
    timeout_s: float = 120.0,
) -> list[ProducedRecord]:
    """Produce ``n_records`` committed records (plus aborted ones) and return them.

    ``partitions``: partition count of every topic (they must exist). Records come in
    chunks of about ``chunk``, alternating at random between plain idempotent produces
    and committed transactions; every ``abort_every``-th chunk (None or 0: never) also
    runs a transaction that is aborted, its records interleaved with the chunk's
    committed ones. Aborted records are extra: the returned list holds exactly
    ``n_records`` committed records, in production order, each with the partition,
    offset and timestamp the broker assigned. The same seed gives the same records
    (null keys always get an explicit partition; keyed ones may go by key hash).
    """
    if n_records < 0 or partitions < 1 or not topics:
        raise ValueError("need n_records >= 0, partitions >= 1 and at least one topic")
    token = uuid.uuid4().hex[:8]
    plain = clients.producer(config, **FAST)
    committing = clients.producer(
        config, **FAST, **{"transactional.id": f"crossfeed-workload-{seed}-{token}-c"}
    )
    aborting = clients.producer(
        config, **FAST, **{"transactional.id": f"crossfeed-workload-{seed}-{token}-a"}
    )
    committing.init_transactions(30)
    aborting.init_transactions(30)
    gen = _Generator(seed, topics, partitions, int(time.time() * 1000), value_bytes)
    committed: list[ProducedRecord] = []
    deadline = time.monotonic() + timeout_s
    chunk_no = 0
    while len(committed) < n_records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"produce_mixed: {len(committed)}/{n_records} after {timeout_s}s")
        chunk_no += 1
        size = min(n_records - len(committed), gen.rng.randrange(chunk // 2, chunk * 3 // 2 + 1))
        transactional = gen.rng.random() < 0.5
        with_abort = abort_every is not None and abort_every > 0 and chunk_no % abort_every == 0
        aborted_size = gen.rng.randrange(1, max(2, size // 4)) if with_abort else 0
        main = committing if transactional else plain
        if transactional:
            committing.begin_transaction()
        if with_abort:
            aborting.begin_transaction()
        specs: list[_Spec] = []
        recorder = _Recorder()
        dropped = _Recorder()
        # Interleave the aborted records evenly between the committed ones.
        step = size / aborted_size if aborted_size else 0
        next_abort = step / 2
        for i in range(size):
            while aborted_size and next_abort <= i:
                _produce(aborting, gen.next(), dropped.callback(-1))
                next_abort += step
            spec = gen.next()
            specs.append(spec)
            _produce(main, spec, recorder.callback(i))
            if i % 5000 == 4999:
                main.poll(0)
                aborting.poll(0)
        aborting.flush(60)  # the aborted records land in the log before the abort
        if main.flush(60):
            raise TimeoutError(f"produce_mixed: chunk {chunk_no} not delivered in 60 s")
        if with_abort and gen.rng.random() < 0.5:
            aborting.abort_transaction(60)
            with_abort = False
        if transactional:
            committing.commit_transaction(60)
        if with_abort:
            aborting.abort_transaction(60)
        if recorder.errors:
            raise KafkaException(
                f"produce_mixed: {len(recorder.errors)} failed: {recorder.errors[:3]}"
            )
        for i, spec in enumerate(specs):
            partition, offset, ts = recorder.placed[i]
            committed.append(
                Record(spec.topic, partition, offset, spec.key, spec.value, spec.headers, ts)
            )
    plain.flush(30)
    return committed


# -- continuous ------------------------------------------------------------------------


class ContinuousProducer:
    """Produce numbered records at ``rate_per_s`` from a background thread until stopped.

    Record ``n`` (from 0) goes to ``topics[n % len(topics)]`` with key ``<name>-<n % keys>``,
    value ``<name>-<n>`` and header ``seq: n``; the partition is chosen by key hash (or
    ``partitions`` round-robin when given). ``acked`` lists what the brokers
    acknowledged so far (with offsets); ``stop()`` flushes and returns the final list.
    Use as a context manager, or call ``start()``/``stop()``.
    """

    def __init__(
        self,
        config: dict[str, Any],
        topics: Sequence[str],
        rate_per_s: float,
        *,
        name: str | None = None,
        partitions: int | None = None,
        keys: int = 100,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        if rate_per_s <= 0 or not topics:
            raise ValueError("rate_per_s must be > 0 and topics non-empty")
        self.topics = list(topics)
        self.rate = rate_per_s
        self.name = name or f"cp-{uuid.uuid4().hex[:6]}"
        self.partitions = partitions
        self.keys = keys
        self._producer = clients.producer(config, **{"linger.ms": 5, **(producer_config or {})})
        self._lock = threading.Lock()
        self._acked: list[ProducedRecord] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0

    def __enter__(self) -> ContinuousProducer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ContinuousProducer:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def _callback(self, spec: _Spec) -> Callable[[KafkaError | None, Any], None]:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            with self._lock:
                if err is not None:
                    self._errors.append(f"{spec.value!r}: {err}")
                else:
                    self._acked.append(
                        Record(
                            spec.topic,
                            msg.partition(),
                            msg.offset(),
                            spec.key,
                            spec.value,
                            spec.headers,
                            msg.timestamp()[1],
                        )
                    )

        return on_delivery

    def _spec(self, n: int) -> _Spec:
        partition = None if self.partitions is None else n % self.partitions
        return _Spec(
            topic=self.topics[n % len(self.topics)],
            partition=partition,
            key=f"{self.name}-{n % self.keys}".encode(),
            value=f"{self.name}-{n}".encode(),
            headers=(("seq", str(n).encode()),),
            timestamp_ms=None,
        )

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate) + 1
            while self.sent < due:
                spec = self._spec(self.sent)
                _produce(self._producer, spec, self._callback(spec))
                self.sent += 1
            self._producer.poll(0)
            self._stop.wait(min(0.01, 1.0 / self.rate))
        self._producer.flush(30)

    def stop(self, timeout_s: float = 30.0) -> list[ProducedRecord]:
        """Stop producing, wait for outstanding deliveries, return everything acknowledged."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._producer.flush(timeout_s)
        return self.acked

    @property
    def acked(self) -> list[ProducedRecord]:
        """Acknowledged records so far, in acknowledgement order (a copy)."""
        with self._lock:
            return list(self._acked)

    @property
    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
