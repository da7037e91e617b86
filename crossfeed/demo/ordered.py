"""``crossfeed demo --ordered``: an ordered feed end to end, from dc-a into PostgreSQL.

The bank workload writes transfers to dc-a (one opening transaction creates every account
with a known total; each transfer moves money between accounts in different partitions,
one partition's changes written late on purpose). A coordinator runs an ordered feed with
two pullers, the Spark sorter and a PostgreSQL sink; meanwhile a separate connection
samples ``SELECT sum(balance)`` in the target many times a second: it must only ever see
the initial total (or no accounts yet), because each source transaction is applied in one
database transaction, in commit order. The live view shows the transfers written, the
feed's state, consistency_ts and newest syncpoint, and the sums sampled.

Every process is stopped at the end, Ctrl-C included; each run has its own topic, feed and
schema, so the demo can run again at once.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crossfeed.client.rest import CoordinatorClient
from crossfeed.demo.scenario import Processes, _answers, wait_until
from crossfeed.local import processes, stack
from crossfeed.local.postgres import URI as POSTGRES_URI
from crossfeed.workload.bank import Summary as BankSummary
from crossfeed.workload.run import run_bank

PARTITIONS = 4
ACCOUNTS = 100
INITIAL_BALANCE = 1000


@dataclass
class OrderedSummary:
    transactions: int = 0  # written to dc-a, the opening included
    applied: bool = False  # the target reached the last commit_ts
    sum_samples: int = 0  # SELECT sum(balance) while the feed ran
    torn_samples: int = 0  # samples that were neither 0 accounts nor the initial total
    initial_total: int = 0
    final_matches: bool = False  # every account's balance equals the source's
    consistency_ts_us: int = 0
    syncpoints: int = 0
    seconds_to_apply: float = 0.0  # last transfer written -> all of it in PostgreSQL

    def lines(self) -> list[str]:
        ts = (
            time.strftime("%H:%M:%S", time.localtime(self.consistency_ts_us / 1e6))
            if self.consistency_ts_us
            else "-"
        )
        return [
            f"transactions written to dc-a      {self.transactions:>8,}",
            f"all applied in PostgreSQL         {'yes' if self.applied else 'NO':>8}",
            f"sum(balance) samples              {self.sum_samples:>8,}",
            f"samples not equal to {self.initial_total:<12,} {self.torn_samples:>8,}",
            f"final balances equal the source's {'yes' if self.final_matches else 'NO':>8}",
            f"consistency_ts                    {ts:>8}",
            f"syncpoint rows                    {self.syncpoints:>8,}",
            f"caught up after the last transfer {self.seconds_to_apply:>8.1f} s",
        ]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SumSampler(threading.Thread):
    """Samples the target's total balance on its own connection, as a reader would."""

    def __init__(self, uri: str, schema: str, total: int) -> None:
        super().__init__(daemon=True)
        self.uri, self.schema, self.total = uri, schema, total
        self.samples = 0
        self.torn: list[int] = []
        self.last: int | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            while not self.stopping.wait(0.05):
                try:
                    row = conn.execute(
                        f'SELECT count(*), coalesce(sum(balance), 0) FROM "{self.schema}".accounts'
                    ).fetchone()
                except psycopg.errors.UndefinedTable:
                    continue  # the opening transaction has not reached the target yet
                except psycopg.Error:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                    continue
                assert row is not None
                count, total = int(row[0]), int(row[1])
                self.samples += 1
                self.last = total
                if count and total != self.total:
                    self.torn.append(total)


@dataclass
class BankDemo:
    """What the bank demos (``--ordered``, ``--cdc``) are told: how long and how fast the
    workload runs, where their lines and live updates go; each run has its own names."""

    seconds: float = 30.0
    rate: float = 200.0
    say: Callable[[str], None] = print
    progress: Callable[[dict[str, Any]], None] = lambda _update: None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])


@dataclass
class OrderedDemo(BankDemo):
    @property
    def feed(self) -> str:
        return f"demo-bank-{self.run_id}"

    @property
    def schema(self) -> str:
        return f"demo_bank_{self.run_id}"

    def run(self) -> OrderedSummary:
        self.say("starting the local stack (dc-a, dc-b, PostgreSQL) ...")
        stack.up(postgres=True)
        with demo_processes("crossfeed-demo-ordered-", self.say) as procs:
            return self._run(procs)

    def _run(self, procs: Processes) -> OrderedSummary:
        a = {"bootstrap.servers": stack.node("dc-a").bootstrap}
        topic = self.feed
        uri = f"{POSTGRES_URI}?schema={self.schema}"
        api = start_ordered_feed(
            procs,
            {
                "name": self.feed,
                "source": "dc-a",
                "sink-uri": uri,
                "topics": [topic],
                "mode": "ordered",
                "config": {"staging.partitions": "2", "syncpoint.interval": "2"},
            },
            pullers=2,
        )
        self.say(f"created ordered feed {self.feed}: dc-a/{topic} -> PostgreSQL {self.schema}")

        total = ACCOUNTS * INITIAL_BALANCE
        sampler = SumSampler(POSTGRES_URI, self.schema, total)
        sampler.start()
        written: dict[str, Any] = {}

        def workload() -> None:
            written["result"] = run_bank(
                a,
                topic,
                accounts=ACCOUNTS,
                partitions=PARTITIONS,
                rate=self.rate,
                seconds=self.seconds,
                skew_partition=1,
                skew_ms=300,
                initial_balance=INITIAL_BALANCE,
            )

        writer = threading.Thread(target=workload, daemon=True)
        writer.start()
        self.say(
            f"bank workload: {ACCOUNTS} accounts, total {total:,}, {self.rate:.0f} transfers/s "
            f"for {self.seconds:.0f} s, partition 1 written 300 ms late"
        )
        began = time.monotonic()
        while writer.is_alive():
            self._show(api, sampler, began)
            time.sleep(1)
        if "result" not in written:
            raise RuntimeError("the bank workload failed; see the messages above")
        summary: BankSummary = written["result"][0]
        expected = written["result"][1].expected_balances()
        finished = time.monotonic()

        def applied() -> bool:
            status = self._show(api, sampler, began)
            return int(status.get("consistency_ts_us") or 0) >= summary.last_commit_ts

        wait_until(applied, 180, "PostgreSQL to hold every transfer (consistency_ts)")
        caught_up = time.monotonic() - finished
        time.sleep(1)
        sampler.stopping.set()
        sampler.join(5)
        status = _feed_status(api, self.feed)
        return OrderedSummary(
            transactions=summary.transactions,
            applied=True,
            sum_samples=sampler.samples,
            torn_samples=len(sampler.torn),
            initial_total=total,
            final_matches=_final_balances(POSTGRES_URI, self.schema) == expected,
            consistency_ts_us=int(status.get("consistency_ts_us") or 0),
            syncpoints=_syncpoints(POSTGRES_URI, self.schema, self.feed),
            seconds_to_apply=caught_up,
        )

    def _show(self, api: CoordinatorClient, sampler: SumSampler, began: float) -> dict[str, Any]:
        status = _feed_status(api, self.feed)
        self.progress(
            {
                "elapsed": time.monotonic() - began,
                "status": status,
                "sum": sampler.last,
                "samples": sampler.samples,
                "torn": len(sampler.torn),
            }
        )
        return status


@contextlib.contextmanager
def demo_processes(prefix: str, say: Callable[[str], None]) -> Iterator[Processes]:
    """The demo's services as processes, their logs in a new directory; every one stopped
    on the way out, Ctrl-C included."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    procs = Processes(workdir)
    try:
        yield procs
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
        raise
    finally:
        try:
            procs.remove_feeds(say)
        finally:
            procs.stop_all()
        say(f"logs of the demo's services: {workdir}")


def start_coordinator(procs: Processes) -> CoordinatorClient:
    """A coordinator, once it leads (it answers before it has won the election, and
    refuses feeds until then)."""
    port = processes.free_port()
    procs.start("coordinator", "coordinator", "run", "--port", str(port))
    api = CoordinatorClient(f"http://127.0.0.1:{port}")
    wait_until(lambda: _answers(api), 60, "the coordinator to answer")
    wait_until(lambda: api.ha_status().get("role") == "leader", 90, "the coordinator to lead")
    return api


def start_ordered_feed(procs: Processes, spec: dict[str, Any], pullers: int) -> CoordinatorClient:
    """A coordinator, the feed ``spec`` created over its REST API, then ``pullers`` pullers,
    the Spark sorter and the sink: the coordinator assigns them the feed's work."""
    api = start_coordinator(procs)
    api.create_feed(spec)
    feed = str(spec["name"])
    procs.created(api, feed)
    for n in range(1, pullers + 1):
        procs.start(f"puller-{n}", "puller", "run", "--feed", feed)
    procs.start("sorter", "sorter", "run", "--feed", feed)
    procs.start("sink", "sink", "run", "--feed", feed)
    return api


def _feed_status(api: CoordinatorClient, feed: str) -> dict[str, Any]:
    try:
        return next((s for s in api.status() if s.get("name") == feed), {})
    except Exception:  # the coordinator is busy or restarting: show nothing this second
        return {}


def _final_balances(uri: str, schema: str) -> dict[int, int]:
    import psycopg

    with psycopg.connect(uri) as conn:
        rows = conn.execute(f'SELECT id, balance FROM "{schema}".accounts').fetchall()
    return {int(r[0]): int(r[1]) for r in rows}


def _syncpoints(uri: str, schema: str, feed: str) -> int:
    import psycopg

    with psycopg.connect(uri) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema}".crossfeed_syncpoint WHERE feed = %s', (feed,)
        ).fetchone()
    return int(row[0]) if row else 0
