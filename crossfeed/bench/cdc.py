"""``crossfeed bench --only cdc``: a real database in, a real database out. The SQL bank
(``crossfeed/workload/sql_bank.py``: accounts and a transfers ledger with foreign keys,
one transaction per transfer, concurrent sessions) replicated from the source
PostgreSQL to the target PostgreSQL by two sides, one after the other in one run:

* ``crossfeed``: Debezium → ordered feed (puller + Debezium reader, Spark sorter, PostgreSQL
  sink), see :mod:`crossfeed.bench.cdc_crossfeed`, with Connect's JSON converter;
* ``crossfeed_avro``: the same with Debezium in Avro (Confluent's wire format, the local
  schema registry);
* ``native``: PostgreSQL's own logical replication, see :mod:`crossfeed.bench.cdc_native`.

Per side: a backlog of transfers written with replication paused, then applied — rows/s
from the first ledger row visible on the target to the last; then transfers at half
that rate (for crossfeed, half the slower of that and Debezium's capture rate: the
pipeline's sustainable rate) for ``lag_seconds``, each ledger row's commit→visible lag;
a sampler on the target all along (torn samples), the peak RSS of every process, the CPU
the side's processes spent per row applied from the backlog (``cpu_ms_per_row``; the Spark
sorter's JVM counted with its process), and at the end whether both tables on the target
equal the source's.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

from crossfeed.bench.cdc_crossfeed import CrossfeedSide
from crossfeed.bench.cdc_figures import apply_rate, capture_rate, cpu_per_row, goals, half_load
from crossfeed.bench.cdc_native import NativeSide
from crossfeed.bench.cdc_watch import LagPoller, max_id, wait_transfers
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.measure import PeakRss, ProcessCost
from crossfeed.workload import sql_bank

ACCOUNTS = 1000
SESSIONS = 4


class Side(Protocol):
    name: str
    source_uri: str
    target_uri: str
    schema: str

    def prepare(self, accounts: int) -> int: ...
    def capture_pids(self) -> dict[str, int]: ...
    def after_backlog(self, transfers: int) -> dict[str, Any]: ...
    def start(self) -> dict[str, int]: ...
    def logs(self) -> str: ...
    def cleanup(self) -> None: ...


def _write(uri: str, *, total: int = 0, rate: float = 0.0, seconds: float = 0.0) -> dict[str, Any]:
    """``total`` transfers, or as many as ``rate`` asks in ``seconds``."""
    began = time.monotonic()
    work = sql_bank.Transfers(uri, ACCOUNTS, sessions=SESSIONS, total=total, rate=rate)
    work.start()
    if seconds:
        time.sleep(seconds)
        work.stop.set()
    work.join()
    if work.errors:
        raise RuntimeError(f"the workload failed: {work.errors[:3]}")
    seconds = max(time.monotonic() - began, 1e-3)
    return {"transfers": work.done, "transfers_per_s": round(work.done / seconds, 1)}


def _equal(side: Side) -> bool:
    """Both tables on the target equal the source's, row for row."""
    tables = {"accounts": sql_bank.ACCOUNT_COLUMNS, "transfers": sql_bank.TRANSFER_COLUMNS}
    return all(
        sql_bank.rows(side.source_uri, "public", t, cols)
        == sql_bank.rows(side.target_uri, side.schema, t, cols)
        for t, cols in tables.items()
    )


def measure(side: Side, *, transfers: int, lag_seconds: float, say: Any) -> dict[str, Any]:
    """One side's figures (module docstring)."""
    try:
        total = side.prepare(ACCOUNTS)
        capture = PeakRss(side.capture_pids())
        capture.start()
        written = time.monotonic()
        out: dict[str, Any] = {"backlog": _write(side.source_uri, total=transfers)}
        out |= side.after_backlog(transfers)
        if "capture_s" in out:  # Debezium: what it published per second, writer included
            out |= capture_rate(transfers, time.monotonic() - written)
        say(f"cdc {side.name}: backlog of {transfers:,} transfers written; applying")
        sampler = sql_bank.Sampler(side.target_uri, side.schema, ACCOUNTS, total)
        sampler.start()
        began = time.monotonic()
        pids = side.start()
        rss = PeakRss(pids)
        rss.start()
        cost = ProcessCost(pids, tree=True)
        try:
            first_at, last_at = wait_transfers(side.target_uri, side.schema, transfers, 1800)
            out |= apply_rate(transfers, first_at, last_at)
            out |= cpu_per_row(cost.finish((first_at, last_at)), transfers)
            out["startup_s"] = round(first_at - began, 1)
            say(f"cdc {side.name}: {out['rows_per_s']:,} rows/s applied from the backlog")
            rate = half_load(min(out["rows_per_s"], out.get("capture_rows_per_s", math.inf)))
            poller = LagPoller(side.target_uri, side.schema, max_id(side.source_uri, "public"))
            poller.start()
            lag_phase = _write(side.source_uri, rate=rate, seconds=lag_seconds)
            arrived = poller.wait_rows(lag_phase["transfers"], 300)
            out["lag"] = poller.finish() | {
                "asked_transfers_per_s": round(rate, 1),
                "offered_transfers_per_s": lag_phase["transfers_per_s"],
                "all_arrived": arrived,
            }
            say(f"cdc {side.name}: lag at half load {out['lag']['lag_ms']}")
        finally:
            cost.stop()
            sampler.stop()
            peaks = rss.finish()
            for label, mb in capture.finish().items():
                peaks[label] = max(peaks.get(label, 0.0), mb)
        out["peak_rss_mb"] = peaks
        out["samples"] = sampler.samples
        out["torn_samples"] = len(sampler.torn)
        out["torn_examples"] = sampler.torn[:3]
        out["target_equals_source"] = _equal(side)
        return out
    except Exception as err:
        raise RuntimeError(f"{err} (logs: {side.logs()})") from err
    finally:
        side.cleanup()


def run(
    janitor: Janitor,
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    transfers: int,
    lag_seconds: float,
    say: Any,
    attempt: Any,
) -> dict[str, Any]:
    """Both sides on the same workload (a section of the result JSON); ``attempt`` runs
    one side and records a failure as such."""
    out: dict[str, Any] = {
        "available": True,
        "transfers": transfers,
        "accounts": ACCOUNTS,
        "sessions": SESSIONS,
        "lag_seconds": lag_seconds,
    }
    sides: list[Side] = [
        NativeSide(),
        CrossfeedSide(janitor, a, b, "json"),
        CrossfeedSide(janitor, a, b, "avro"),
    ]
    for side in sides:
        out[side.name] = attempt(
            say,
            f"cdc {side.name}",
            lambda s=side: measure(s, transfers=transfers, lag_seconds=lag_seconds, say=say),
        )
    out["goals"] = goals(out["crossfeed"], out["native"])
    return out
