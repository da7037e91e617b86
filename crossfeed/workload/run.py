"""Writing the bank workload to Kafka (the I/O around :mod:`crossfeed.workload.bank`).

:func:`run_bank` creates the topic if absent, writes the opening transaction, then
transfers at ``rate`` transactions/s (0: as fast as it can) until ``seconds`` have passed
or ``transactions`` have been written, with resolved watermarks to every partition every
``resolved_interval_s`` (the producer's :meth:`~crossfeed.client.ChangeProducer.tick`,
driven by this loop). It returns the :class:`~crossfeed.workload.bank.Summary` and the
:class:`~crossfeed.workload.bank.Bank` (``bank.expected_balances()``: the final state).

Skew (``skew_partition``, ``skew_ms``): every record of that partition after the first
watermark — changes and watermarks — is written ``skew_ms`` late, in order (a
:class:`~crossfeed.workload.skew.DelayLine`). The first watermark of every partition is
written at once, so the puller knows from the start that the partitions follow
watermarks (docs/ordered-feeds.md §2). The run ends with a last watermark at the clock and
waits until everything held back is written and delivered.

The producer is idempotent, not transactional: a source transaction's changes become
visible on the source one by one — it is the ordered feed that applies them whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from crossfeed.client.producer import Change, ChangeProducer, Outgoing
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.workload.bank import Bank, Summary
from crossfeed.workload.skew import DelayLine

log = logging.getLogger(__name__)

PRODUCER_CONFIG = {
    "linger.ms": 10,
    "batch.size": 1 << 20,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 128 << 10,  # bounded: a big opening waits for delivery
    "acks": "all",
}
# The pace is kept to the millisecond: transfers due within the next one are written at
# once. Waking for each transfer (every 125 µs at 8,000/s) cost the workload more CPU than
# building the transfers.
PACE_S = 0.001


class SkewedChangeProducer(ChangeProducer):
    """A ChangeProducer whose records to some partitions are written late (in order)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        delays_s: Mapping[int, float],
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        if delays_s and "transactional.id" in config:
            raise ValueError("skew needs a non-transactional producer")
        super().__init__(config, **kwargs)
        self.line: DelayLine[Outgoing] = DelayLine(delays_s)
        self.holding = False  # set once the first watermarks are out
        self._clock = clock

    def _write(self, record: Outgoing) -> None:
        if not (self.holding and self.line.put(record.partition, record, self._clock())):
            self._produce(record)

    def release(self) -> int:
        """Write the held records that are due; returns how many are still held."""
        with self._lock:
            for record in self.line.due(self._clock()):
                self._produce(record)
            return len(self.line)

    def close(self) -> None:
        """The held records first (as they fall due), then the final watermarks straight
        out: held back, a skewed partition's would never be written."""
        self.drain()
        self.holding = False
        super().close()

    def drain(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Wait until every held record has been written (as each falls due); no more
        watermarks meanwhile (a skewed partition's would be held again, for ever)."""
        while self.release() and not stop():
            due = self.line.next_due()
            time.sleep(max(0.0, min(0.05, (due or 0) - self._clock())))


def run_bank(
    cluster: Mapping[str, Any],
    topic: str,
    *,
    accounts: int,
    partitions: int = 8,
    rate: float = 0.0,
    seconds: float | None = None,
    transactions: int | None = None,
    skew_partition: int | None = None,
    skew_ms: int = 0,
    initial_balance: int = 1000,
    seed: int | None = None,
    resolved_interval_s: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
    build_ahead: bool = False,
) -> tuple[Summary, Bank]:
    """Write the bank workload to ``topic`` on ``cluster`` (a client config); see the
    module docstring. ``transactions`` counts the transfers (the opening comes on top);
    with neither ``seconds`` nor ``transactions`` it runs until ``stop()`` is true.

    ``build_ahead`` (with ``rate`` and ``seconds``): encode every transfer of the run
    before anything is written and the clock starts, so the paced writing costs only the
    produce calls (about a third of the CPU). For benchmarks on a small machine, where
    the workload's own CPU would slow the pipeline it measures; it holds the whole run's
    changes in memory (~270 bytes each for the bank's)."""
    if rate < 0:
        raise ValueError(f"rate must be >= 0, not {rate}")
    admin = clients.admin(cluster)
    kafka_topics.ensure_topic(admin, topic, partitions)
    actual = kafka_topics.partition_count(admin, topic)
    if actual is None:
        raise RuntimeError(f"topic {topic} is not readable after creating it")
    if actual != partitions:
        log.warning("topic %s exists with %d partitions (not %d)", topic, actual, partitions)
    if skew_partition is not None and not 0 <= skew_partition < actual:
        raise ValueError(f"--skew-partition {skew_partition} is not a partition of {topic}")
    bank = Bank(accounts, actual, topic, initial_balance, seed)
    delays = {skew_partition: skew_ms / 1000} if skew_partition is not None and skew_ms else {}
    producer = SkewedChangeProducer(
        {**cluster, **PRODUCER_CONFIG},
        delays,
        resolved_interval_s=resolved_interval_s,
        topics=[topic],
    )
    txn, opening = bank.opening()  # built as it is written
    ahead: list[list[Change]] = []
    if build_ahead and rate > 0 and seconds is not None:
        # Built before anything is written: the opening's changes, written before a
        # pause that long, would wait all of it for their watermark.
        ahead = bank.changes_ahead(int(rate * seconds) + 1)
    started = time.monotonic()
    producer.resolved([topic], 0)  # every partition follows watermarks from the start
    producer.holding = True
    _, first_ts = producer.transaction(opening, txn_id=txn)
    deadline = None if seconds is None else started + seconds
    interval = 1 / rate if rate > 0 else 0.0
    written = 0
    next_at = time.monotonic()
    while not stop():
        if transactions is not None and written >= transactions:
            break
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        if interval and now < next_at - PACE_S:
            producer.release()
            producer.tick()
            time.sleep(min(next_at - now, 0.01))
            continue
        transfer = bank.next_transfer()
        if written < len(ahead):
            changes, ahead[written] = ahead[written], []  # built for this very transfer
        else:
            changes = bank.transfer_changes(transfer)
        producer.transaction(changes, txn_id=transfer.txn)
        written += 1
        next_at += interval
        if written % 256 == 0:
            producer.release()
            producer.tick()
    # Everything written is covered by a last watermark (at the clock), then delivered.
    producer.resolved(ts_us=max(producer.last_commit_ts_us, int(time.time() * 1_000_000)))
    producer.drain()
    producer.close()
    summary = Summary(
        topic=topic,
        run_id=bank.run_id,
        partitions=actual,
        accounts=accounts,
        transactions=bank.transactions,
        events=bank.events,
        initial_total=bank.total,
        first_commit_ts=first_ts,
        last_commit_ts=producer.last_commit_ts_us,
        seconds=time.monotonic() - started,
        skew_partition=skew_partition if delays else None,
        skew_ms=skew_ms if delays else 0,
    )
    return summary, bank


def write_transactions(
    cluster: Mapping[str, Any], topic: str, transactions: int, **kwargs: Any
) -> tuple[Summary, dict[int, int]]:
    """Tests' entry point: the opening plus ``transactions`` transfers as fast as possible;
    returns the summary and the expected final balances (account id -> balance)."""
    kwargs.setdefault("accounts", 100)
    summary, bank = run_bank(cluster, topic, transactions=transactions, **kwargs)
    return summary, bank.expected_balances()
