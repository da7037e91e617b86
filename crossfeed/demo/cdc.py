"""``crossfeed demo --cdc``: a PostgreSQL database captured by Debezium, replicated in
commit order into another PostgreSQL through an ordered feed (``--input debezium``).

A fresh database on the local stack's source PostgreSQL gets the SQL bank's tables
(crossfeed/workload/sql_bank.py: ``accounts`` and a ``transfers`` ledger with foreign
keys), its accounts opened and a first batch of transfers written *before* the Debezium
connector is registered, so they arrive by its initial snapshot. A coordinator runs the
feed (a puller reading Debezium's topics in commit order, the Spark sorter, the
PostgreSQL sink). Once the snapshot is all in the target — its rows carry no source
transaction, so a reader may see it in parts: the sampler starts only then — concurrent
sessions write transfers, each one real multi-statement transaction over both tables,
while a sampler reads the target in REPEATABLE READ: the total balance must never change
and no ledger row may be without its accounts. At the end both tables are compared row
for row, source against target. With ``format`` avro the connector writes Avro in
Confluent's wire format against the local stack's schema registry, and the feed reads it
from there.

Every process is stopped at the end, Ctrl-C included, and the connector, its replication
slot and the source database are removed; the target schema ``demo_cdc_<run>`` stays for
a look (drop it at will), like the Kafka topics ``demo_cdc_<run>.*`` on dc-a.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from crossfeed.client.rest import CoordinatorClient
from crossfeed.demo.ordered import BankDemo, _feed_status, demo_processes, start_ordered_feed
from crossfeed.demo.scenario import Processes
from crossfeed.local import captured, stack
from crossfeed.local.captured import CapturedDatabase
from crossfeed.local.postgres import URI as POSTGRES_URI
from crossfeed.workload import sql_bank
from crossfeed.workload.sql_bank import TableComparison

ACCOUNTS = 100
SNAPSHOT_TRANSFERS = 200  # written before the connector: Debezium's snapshot brings them
SESSIONS = 4
CATCH_UP_TIMEOUT_S = 180.0


@dataclass
class CdcSummary:
    transactions: int = 0  # transfers committed on the source (one ledger row each)
    snapshot_transfers: int = 0  # of which written before the connector was registered
    tables: list[TableComparison] = field(default_factory=list)
    samples: int = 0  # REPEATABLE READ reads of the target while the feed ran
    torn: list[str] = field(default_factory=list)  # samples the source never had
    seconds_to_apply: float = 0.0  # last transfer committed -> the target equals the source
    errors: list[str] = field(default_factory=list)  # the workload's sessions

    @property
    def equal(self) -> bool:
        return bool(self.tables) and all(t.equal for t in self.tables)

    @property
    def ok(self) -> bool:
        """Everything the demo shows held: worth exit code 0."""
        return self.equal and not self.torn and self.samples > 0 and not self.errors

    def lines(self) -> list[str]:
        lines = [
            f"transactions written on the source {self.transactions:>8,}"
            f"  ({self.snapshot_transfers:,} before the snapshot)",
        ]
        for t in self.tables:
            lines.append(
                f"{t.table + ' rows, source / target':<34} {t.source_rows:>8,} / {t.target_rows:,}"
            )
        lines += [
            f"samples of the target              {self.samples:>8,}",
            f"torn samples                       {len(self.torn):>8,}",
            f"tables equal, row for row          {'yes' if self.equal else 'NO':>8}",
            f"caught up after the last transfer  {self.seconds_to_apply:>8.1f} s",
        ]
        lines += [f"differs: {t.line()}" for t in self.tables if not t.equal]
        lines += [f"torn: {torn}" for torn in self.torn[:3]]
        lines += [f"workload error: {err}" for err in self.errors]
        if not self.samples:
            lines.append("the sampler never read the target's tables")
        return lines

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["equal"], found["ok"] = self.equal, self.ok
        return found


@dataclass
class CdcDemo(BankDemo):
    rate: float = 100.0
    format: str = "json"  # the connector's: json, or avro with the local schema registry

    @property
    def name(self) -> str:
        """The source database's, the connector's, the topic prefix's and the target
        schema's name (the feed's, with '-' for '_')."""
        return f"demo_cdc_{self.run_id}"

    def run(self) -> CdcSummary:
        self.say(
            "starting the local stack (dc-a, dc-b, PostgreSQL) and the capture side "
            "(source PostgreSQL, Kafka Connect with Debezium) ..."
        )
        stack.up(postgres=True, cdc=True)
        db = captured.create(self.name, stack.connect_worker().url)
        try:
            with demo_processes("crossfeed-demo-cdc-", self.say) as procs:
                return self._run(procs, db)
        finally:
            captured.drop(db)
            self.say(
                f"removed connector {db.name}, its replication slot and source database "
                f"{db.name}; the target schema {self.name} stays"
            )

    def _run(self, procs: Processes, db: CapturedDatabase) -> CdcSummary:
        total = sql_bank.create(db.uri, ACCOUNTS)
        before = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=2, total=SNAPSHOT_TRANSFERS)
        before.start().join(120)
        self.say(
            f"source database {db.name}: {ACCOUNTS} accounts (total {total:,}) and "
            f"{SNAPSHOT_TRANSFERS} transfers, written before capture starts"
        )
        registry = stack.registry().url
        avro = self.format == "avro"
        db.register(heartbeat_ms=500, format=self.format, registry_url=registry)
        db.wait_running()
        self.say(
            f"connector {db.name} registered: Debezium snapshots {db.name}, then streams "
            f"its changes to dc-a topics {db.prefix}.public.*"
            + (f", in Avro with its schemas in {registry}" if avro else ", in JSON")
        )
        feed = self.name.replace("_", "-")
        api = start_ordered_feed(
            procs,
            {
                "name": feed,
                "source": "dc-a",
                "sink-uri": f"{POSTGRES_URI}?schema={self.name}",
                "topics": [db.topics],
                "mode": "ordered",
                "config": {"input": "debezium"}
                | ({"schema.registry.url": registry} if avro else {}),
            },
            pullers=1,
        )
        self.say(f"created ordered feed {feed}: Debezium -> PostgreSQL {self.name}")
        sampler = sql_bank.Sampler(POSTGRES_URI, self.name, ACCOUNTS, total)
        workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=SESSIONS, rate=self.rate)
        began = time.monotonic()
        try:
            snapshot = (ACCOUNTS, SNAPSHOT_TRANSFERS)
            while self._show(api, db, sampler, began) != snapshot:
                if time.monotonic() - began > CATCH_UP_TIMEOUT_S:
                    raise TimeoutError(
                        f"the snapshot did not reach PostgreSQL {self.name} within "
                        f"{CATCH_UP_TIMEOUT_S:.0f}s"
                    )
                time.sleep(1)
            self.say(
                f"Debezium's snapshot arrived after {time.monotonic() - began:.0f} s: "
                f"{ACCOUNTS} accounts and {SNAPSHOT_TRANSFERS} transfers in the target (its "
                "rows carry no source transaction and are applied in several database "
                "transactions: the sampler reads the target from now on)"
            )
            sampler.start()
            workload.start()
            self.say(
                f"SQL bank workload: {SESSIONS} concurrent sessions, {self.rate:.0f} "
                f"transactions/s for {self.seconds:.0f} s (debit, credit and ledger row in "
                "each); a sampler reads the target in REPEATABLE READ"
            )
            writing = time.monotonic()
            while time.monotonic() - writing < self.seconds and not workload.errors:
                self._show(api, db, sampler, began)
                time.sleep(1)
            workload.stop.set()
            workload.join(30)
            finished = time.monotonic()
            deadline = finished + CATCH_UP_TIMEOUT_S
            tables = sql_bank.compare(db.uri, POSTGRES_URI, self.name)
            while not all(t.equal for t in tables) and time.monotonic() < deadline:
                self._show(api, db, sampler, began)
                time.sleep(1)
                tables = sql_bank.compare(db.uri, POSTGRES_URI, self.name)
            caught_up = time.monotonic() - finished
            self._show(api, db, sampler, began)
            time.sleep(1)  # a last second of samples on the final state
        finally:
            workload.stop.set()
            if sampler.ident is not None:  # started
                sampler.stop()
        return CdcSummary(
            transactions=next(t.source_rows for t in tables if t.table == "transfers"),
            snapshot_transfers=SNAPSHOT_TRANSFERS,
            tables=tables,
            samples=sampler.samples,
            torn=list(sampler.torn),
            seconds_to_apply=caught_up,
            errors=[*before.errors, *workload.errors],
        )

    def _show(
        self,
        api: CoordinatorClient,
        db: CapturedDatabase,
        sampler: sql_bank.Sampler,
        began: float,
    ) -> tuple[int, int] | None:
        """Shows a second of progress; the target's (accounts, transfers)."""
        target = _counts(POSTGRES_URI, self.name)
        self.progress(
            {
                "elapsed": time.monotonic() - began,
                "status": _feed_status(api, self.name.replace("_", "-")),
                "source": _counts(db.uri, "public"),
                "target": target,
                "samples": sampler.samples,
                "torn": len(sampler.torn),
            }
        )
        return target


def _counts(uri: str, schema: str) -> tuple[int, int] | None:
    """(accounts, transfers) in one snapshot; None when it cannot be read this second."""
    with contextlib.suppress(psycopg.Error):
        with psycopg.connect(uri, autocommit=True, connect_timeout=2) as conn:
            seen = sql_bank.sample(conn, schema)
        return seen.accounts, seen.transfers
    return None
