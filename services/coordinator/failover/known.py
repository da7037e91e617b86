"""Ordered-feed failover: which source transactions are known to have committed, read
from where they can still be read (crossfeed/core/takeover.py says what is lost).

* :func:`from_source` — the source cluster (dc-a): a Debezium feed's transaction topic
  (every END Debezium wrote, whether the reader ordered it or not), or a change
  producer's source topics. When it answers, the count is exact.
* :func:`from_staging` — the feed's ``_crossfeed.<feed>.changes`` on the target side:
  what the pullers copied before the source was lost. A lower bound.

Both read from a little before the target's state (``LOOKBACK_MS`` before its commit
time, by record timestamp: a later commit is written later) to the end, read_committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import KafkaException

from crossfeed.cdc.registry import RegistryUnavailable, SchemaRegistry, read_debezium
from crossfeed.core.takeover import Known, debezium_order
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients, scan
from crossfeed.wire import debezium, headers, topics
from crossfeed.wire.changes import parse_txn
from crossfeed.wire.debezium import NotDebezium

log = logging.getLogger(__name__)

LOOKBACK_MS = 300_000
PROBE_S = 5.0


class Unanswered(RuntimeError):
    """The cluster did not answer: what it holds is not known."""


def _records(conf: dict[str, Any], topic_names: list[str], since_ms: int) -> Iterator[Any]:
    return scan.records_since(conf, topic_names, since_ms, "crossfeed-failover-scan")


def _answers(conf: dict[str, Any]) -> bool:
    return scan.answers(conf)


def _header(hdrs: list[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    for key, value in hdrs or ():
        if key == name:
            return value
    return None


def from_source(conf: dict[str, Any], feed: FeedSpec, since_ms: int) -> list[Known]:
    """Transactions the source cluster holds from ``since_ms`` on; Unanswered when it is
    gone."""
    if not _answers(conf):
        raise Unanswered(f"{feed.source} does not answer")
    try:
        if feed.input == "debezium":
            return _debezium_ends(conf, feed, since_ms)
        return _produced(conf, feed, since_ms)
    except (KafkaException, TimeoutError) as err:
        raise Unanswered(f"{feed.source}: {err}") from None


def _debezium_ends(conf: dict[str, Any], feed: FeedSpec, since_ms: int) -> list[Known]:
    prefix = feed.debezium_prefix()
    selector = feed.selector
    url = feed.config.schema_registry_url
    registry = SchemaRegistry(url) if url else None  # Debezium in Avro
    out = []
    for msg in _records(conf, [debezium.transaction_topic(prefix)], since_ms):
        try:
            read = debezium.txn_record, debezium.txn_record_of
            end = read_debezium(msg.value(), registry, *read)
        except NotDebezium:
            continue
        except RegistryUnavailable as err:
            raise Unanswered(str(err)) from None
        if end is None:  # a BEGIN
            continue
        tables = [debezium.collection_topic(prefix, c) for c, _ in end.collections]
        if tables and not any(selector.selects(t) for t in tables):
            continue  # the reader skips a transaction touching none of the feed's tables
        out.append(Known(end.txn_id, end.lsn, end.ts_us))
    return out


def _produced(conf: dict[str, Any], feed: FeedSpec, since_ms: int) -> list[Known]:
    consumer = clients.consumer(conf, **{"group.id": "crossfeed-failover-scan"})
    try:
        names = feed.read_topics(consumer.list_topics(timeout=PROBE_S).topics)
    finally:
        consumer.close()

    def ident(msg: Any) -> str:
        return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"

    return _changes(_records(conf, names, since_ms), ident, ordered_by_lsn=False)


def from_staging(conf: dict[str, Any], feed: FeedSpec, since_ms: int) -> list[Known]:
    """Transactions the feed's staging topic holds from ``since_ms`` on (what crossed)."""

    def ident(msg: Any) -> str:
        prov = _header(msg.headers(), headers.PROV)
        return f"prov:{(prov or b'').decode('utf-8', 'replace')}"

    records = _records(conf, [topics.changes(feed.name)], since_ms)
    return _changes(records, ident, ordered_by_lsn=feed.input == "debezium")


def _changes(
    records: Iterator[Any], ident: Callable[[Any], str], *, ordered_by_lsn: bool
) -> list[Known]:
    """The transactions of change records (watermarks and marks skipped): txn id from
    ``crossfeed-txn``, else the change alone (``ident``)."""
    out = []
    for msg in records:
        hdrs = msg.headers()
        if _header(hdrs, headers.TYPE) is not None:
            continue
        stamp = _header(hdrs, headers.COMMIT_TS)
        if stamp is None or not stamp.isdigit():
            continue
        commit_ts = int(stamp)
        raw = _header(hdrs, headers.TXN)
        try:
            txn = parse_txn(raw).txn if raw is not None else ident(msg)
        except ValueError:
            continue
        order = debezium_order(txn) if ordered_by_lsn else None
        out.append(Known(txn, order if order is not None else commit_ts, commit_ts))
    return out
