"""Client constructors with crossfeed's defaults; cluster properties pass through.

librdkafka logs through Python logging (logger ``crossfeed.kafka.<client>``), so
connection errors of a cluster that is down show up in the service log once,
in its format, instead of being printed to stderr by the C library. Every client
crossfeed builds, the client library's included, gets its logger from :func:`logged`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from crossfeed.kafka import protocols
from crossfeed.kafka.client_overrides import for_client

QUIET = logging.getLogger("crossfeed.kafka.quiet")
QUIET.setLevel(logging.CRITICAL)
QUIET.propagate = False


def logged(conf: Mapping[str, Any], kind: str, logger: Any = None) -> dict[str, Any]:
    """``conf`` with librdkafka's log lines sent to Python logging (confluent-kafka's
    ``logger`` property): the logger ``conf`` names, else ``logger``, else
    ``crossfeed.kafka.<kind>``; librdkafka's levels map onto logging's (3: ERROR, 4:
    WARNING, 5-6: INFO, 7: DEBUG). Without it librdkafka prints ``%4|...|`` lines straight
    to stderr."""
    out = dict(conf)
    out.setdefault("logger", logger or logging.getLogger(f"crossfeed.kafka.{kind}"))
    return out


def _merge(
    cluster: Mapping[str, Any],
    overrides: Mapping[str, Any],
    kind: str,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """crossfeed's defaults for this kind of client, then the cluster's properties (with
    its ``<kind>.*`` overrides, see :mod:`client_overrides`), then what the caller needs."""
    return logged({**(defaults or {}), **for_client(cluster, kind), **overrides}, kind)


def admin(cluster: Mapping[str, Any], **overrides: Any) -> AdminClient:
    return AdminClient(_merge(cluster, overrides, "admin"))


def producer(cluster: Mapping[str, Any], **overrides: Any) -> Producer:
    """An idempotent producer; add ``transactional.id`` for transactions."""
    # Tunable (a cluster's or its producer.* properties win): batching and compression.
    defaults = {"linger.ms": 5, "compression.type": "lz4"}
    # Not tunable: transactions and exactly-once copies need it.
    required = {"enable.idempotence": True}
    return Producer(_merge(cluster, {**required, **overrides}, "producer", defaults))


def transactional_producer(
    cluster: Mapping[str, Any],
    transactional_id: str,
    *,
    init_timeout_s: float = 60.0,
    **overrides: Any,
) -> Producer:
    """A producer for Kafka transactions under ``transactional_id``, ready to use: its
    ``init_transactions`` has run, so any earlier producer with that id is fenced and the
    transaction it left open settled. KafkaException if that does not complete in time.

    ``transaction.timeout.ms`` defaults to 15 s: the open transaction of a producer that
    stopped answering (paused, cut off) holds back every read_committed reader of the
    partitions it wrote until the broker aborts it, or until a new producer with the same id
    takes over."""
    conf = {"transactional.id": transactional_id, "transaction.timeout.ms": 15000, **overrides}
    made = producer(cluster, **conf)
    made.init_transactions(init_timeout_s)
    return made


def consumer(cluster: Mapping[str, Any], **overrides: Any) -> Consumer:
    """A read_committed consumer that never auto-commits (crossfeed commits itself)."""
    # Not tunable through cluster properties: what crossfeed's guarantees rest on (aborted
    # transactions never copied, positions committed by crossfeed alone).
    required = {
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    # Tunable (a cluster's or its consumer.* properties win).
    # Once the prefetch queue is full librdkafka pauses fetching a partition this long
    # (default 1000 ms): a reader that drains its queue in 100 ms then sat idle for
    # 900, which held the puller to ~64 MB/s. Fetch again as soon as there is room.
    defaults = {"fetch.queue.backoff.ms": 10}
    return Consumer(_merge(cluster, {**required, **overrides}, "consumer", defaults))


def read_batch(consumer: Any, max_records: int, wait_s: float) -> list[Any]:
    """Up to ``max_records`` records, returned as soon as one is there (at most ``wait_s``).

    librdkafka's ``consume(n, timeout)`` waits out its whole timeout unless ``n`` records
    arrive: a reader that is between transactions and asks for 2,000 records with 0.5 s
    held every change a quarter of a second on average. ``poll`` wakes with the first
    record; what is already fetched behind it comes without waiting."""
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]


class _Collect(logging.Handler):
    """Keeps the messages of librdkafka's log lines (a probe's, for diagnose)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def probe(cluster: Mapping[str, Any], timeout_s: float = 5.0) -> tuple[str | None, list[str]]:
    """(the cluster.id a metadata request returns, or None if nothing answers in time;
    the client's error and log messages meanwhile — for :func:`diagnose.diagnose`, since a
    failed TLS handshake or SASL login shows only there)."""
    texts: list[str] = []
    # An unregistered logger: its lines go to ``texts`` only, never to the service log.
    collector = logging.Logger("crossfeed.kafka.probe", logging.DEBUG)
    collector.addHandler(_Collect(texts))
    client = admin(
        cluster,
        logger=collector,
        error_cb=lambda err: texts.append(str(err.str())),
        **{"socket.connection.setup.timeout.ms": 1000},
    )
    try:
        meta = client.list_topics(timeout=timeout_s)
    except Exception:  # KafkaException: no broker answered within the timeout
        client.poll(0.1)  # serves the error callbacks and log lines queued meanwhile
        return None, texts
    return (str(meta.cluster_id) if meta.cluster_id else None), texts


def cluster_id(cluster: Mapping[str, Any], timeout_s: float = 5.0) -> str | None:
    """The cluster.id a metadata request returns, or None if nothing answers in time."""
    return probe(cluster, timeout_s)[0]


def is_fatal(err: KafkaError) -> bool:
    """True when the client that reported ``err`` can do nothing more: only a new one can.
    A consumer hands its fatal error to the application as a message whose error has
    code ``_FATAL`` and, unlike the exception, no fatal flag."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


FENCING_CODES = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
"""Errors after which a transactional producer may never write again: a newer producer
with its transactional.id took over, or it lost the right to that id."""


def is_fenced(err: KafkaError) -> bool:
    """This transactional producer is done for: fenced, or failed fatally (librdkafka then
    refuses every further call). Its owner must stop, or start over with a new one."""
    return err.code() in FENCING_CODES or err.fatal()


def callback_failure(err: BaseException) -> KafkaException | None:
    """The KafkaException behind ``err``, when confluent-kafka raised one from inside
    a poll or flush: a fatal error (a fenced transactional producer) is raised from its
    error callback, and when librdkafka then serves another callback in the same call
    (a delivery report), Python reports that callback as ``SystemError: ... returned a
    result with an exception set``, caused by the KafkaException. None: another error."""
    if isinstance(err, KafkaException):
        return err
    if isinstance(err, SystemError):
        cause = err.__cause__ or err.__context__
        if isinstance(cause, KafkaException):
            return cause
    return None


def served(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` (a poll, flush or transactional call that serves callbacks),
    raising the KafkaException of a fatal error rather than the SystemError above."""
    try:
        return call(*args)
    except (KafkaException, SystemError) as err:
        failure = callback_failure(err)
        if failure is None:
            raise
        raise failure from None


def abort_after(
    producer: protocols.TransactionalProducer, err: BaseException, timeout_s: float
) -> None:
    """End the open transaction that ``err`` interrupted (the caller raises ``err`` after
    it). A fenced producer has nothing left to abort, and its abort would raise a conflict
    ("commit_transaction API call is already in progress") that hides why: its
    KafkaException is raised instead, from here."""
    failure = callback_failure(err)
    if failure is not None and is_fenced(failure.args[0]):
        raise failure from None
    producer.abort_transaction(timeout_s)


def flush(producer: protocols.Producer, timeout_s: float) -> int:
    """``producer.flush``: the messages still undelivered after ``timeout_s``; raises
    KafkaException when the producer failed fatally (see :func:`served`)."""
    return int(served(producer.flush, timeout_s))


def poll(producer: protocols.Producer, timeout_s: float) -> None:
    """``producer.poll``, raising KafkaException like :func:`flush`."""
    served(producer.poll, timeout_s)


def produce_waiting(
    producer: protocols.Producer, topic: str, poll_s: float = 0.05, **kwargs: Any
) -> None:
    """``producer.produce``, waiting while the local queue is full (bounded memory: the
    queue drains as deliveries complete). Per-record loops use :func:`produce_copy`."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            poll(producer, poll_s)


def produce_copy(
    producer: protocols.Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    partition: int,
    on_delivery: Any,
    timestamp_ms: int,
    headers: list[protocols.Header] | None,
) -> None:
    """:func:`produce_waiting` for the per-record paths (copies, applied changes): by
    position — topic, value, key, partition, on_delivery, its alias, timestamp (0: now),
    headers — because confluent-kafka looks each keyword up through a new str per call,
    ~2 µs of the ~7 µs a 1 KiB copy costs. The puller's block loop inlines the same call
    (services/puller/copies.py: one function call per record is measurable there)."""
    while True:
        try:
            producer.produce(topic, value, key, partition, on_delivery, None, timestamp_ms, headers)
            return
        except BufferError:
            poll(producer, 0.05)
