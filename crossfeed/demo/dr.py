"""``crossfeed demo --dr``: lose dc-a under a database feed and come back
(docs/disaster-recovery.md).

The local stack runs with both sides captured (``local up --active-active``). A fresh
database ``demo_dr_<run>`` on each server gets the SQL bank's tables; dc-a's is captured by
Debezium and a coordinator runs the feed into dc-b's. An application
(``sql_bank.FollowingTransfers``) writes transfers to the primary of the moment and keeps
the ledger id of every transfer it saw commit. Then:

1. dc-a is lost: its broker is killed (kill -9) and its database stopped, mid-workload.
   ``POST /v1/failover``: dc-b's database is the primary; the RPO ("at least N", dc-a
   being gone) is checked against what the application committed and dc-b lacks.
2. The application writes to dc-b.
3. dc-a comes back (broker, database). A second failover report, now exact, counts the
   transactions dc-b lacks. ``POST /v1/failback/database`` lists the divergent tail — the
   demo checks it is exactly those transfers — re-seeds dc-a's database from dc-b's and
   creates the reverse feed, whose puller, sorter and sink the demo starts.
4. ``POST /v1/switchover`` of the reverse feed: dc-b frozen, drained, compared by digest;
   a new forward feed from dc-a, whose services the demo starts; the application moves
   back to dc-a. At the end both databases are compared row for row.

Every process is stopped at the end, Ctrl-C included, the connectors removed and their
slots dropped; both databases stay for a look.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from confluent_kafka import KafkaException

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.client.rest import CoordinatorClient
from crossfeed.core import takeover
from crossfeed.demo.ordered import BankDemo, _feed_status, demo_processes, start_coordinator
from crossfeed.demo.scenario import Processes, wait_until
from crossfeed.dr import failback
from crossfeed.kafka import clients, scan
from crossfeed.local import captured, postgres, stack
from crossfeed.wire import debezium
from crossfeed.workload import sql_bank
from crossfeed.workload.sql_bank import FollowingTransfers

ACCOUNTS = 40
TIMEOUT_S = 300.0


@dataclass
class DrSummary:
    committed: dict[str, int] = field(default_factory=dict)  # transfers per primary
    consistency_ts_us: int = 0
    rpo_at_failover: str = ""
    rpo_reported: int = 0
    rpo_exact_later: int = 0
    lost: int = 0  # committed on dc-a, never on dc-b (the application's own log)
    tail_listed: int = 0
    tail_matches: bool = False
    failover_s: float = 0.0
    writes_refused_s: float = 0.0
    equal: bool = False
    differs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.equal
            and self.tail_matches
            and 0 < self.rpo_reported <= self.lost
            and self.rpo_exact_later == self.lost
            and not self.errors
        )

    def lines(self) -> list[str]:
        def row(label: str, value: str) -> str:
            return f"{label:<40}{value:>10}"

        lines = [
            row(f"transfers written on {side}", f"{n:,}") for side, n in self.committed.items()
        ]
        lines += [
            row("lost at the failover (the app's log)", f"{self.lost:,}"),
            f"{'RPO reported with dc-a gone':<40}{self.rpo_at_failover}",
            row("RPO reported with dc-a back (exact)", f"{self.rpo_exact_later:,}"),
            row("divergent tail listed by failback", f"{self.tail_listed:,}")
            + ("  (exactly the lost transfers)" if self.tail_matches else "  (NOT the lost ones)"),
            row("failover took", f"{self.failover_s:.1f} s"),
            row("switch back: writes refused", f"{self.writes_refused_s:.1f} s"),
            row("databases equal, row for row", "yes" if self.equal else "NO"),
        ]
        lines += [f"differs: {line}" for line in self.differs]
        lines += [f"workload error: {err}" for err in self.errors]
        return lines

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["ok"] = self.ok
        return found


@dataclass
class DrDemo(BankDemo):
    @property
    def feed(self) -> str:
        return f"demo-dr-{self.run_id}"

    @property
    def database(self) -> str:
        return f"demo_dr_{self.run_id}"

    def run(self) -> DrSummary:
        self.say(
            "starting the local stack with both sides captured (dc-a, dc-b, both PostgreSQL "
            "servers, Kafka Connect with Debezium on each side) ..."
        )
        stack.up(postgres=True, cdc=True, active_active=True)
        a = captured.create(self.database, stack.connect_worker().url)
        b_uri = postgres.target(active_active=True).create_database(self.database)
        try:
            with demo_processes("crossfeed-demo-dr-", self.say) as procs:
                return self._run(procs, a, b_uri)
        finally:
            self._remove(a, b_uri)

    def _run(self, procs: Processes, a: captured.CapturedDatabase, b_uri: str) -> DrSummary:
        summary = DrSummary()
        for uri in (a.uri, b_uri):
            sql_bank.create(uri, ACCOUNTS)
        a.register(heartbeat_ms=500)
        a.wait_running()
        api = start_coordinator(procs)
        api = CoordinatorClient(api.servers[0], timeout_s=TIMEOUT_S)
        api.create_feed(
            {
                "name": self.feed,
                "source": "dc-a",
                "sink-uri": f"{b_uri}?schema=public",
                "topics": [rf"{a.prefix}\.public\.(accounts|transfers)"],
                "mode": "ordered",
                "input": "debezium",
                "config": {"debezium.topic.prefix": a.prefix},
            }
        )
        procs.created(api, self.feed)
        self._start(procs, api, self.feed)
        self.say(
            f"database {self.database} on both servers; dc-a's captured by Debezium; "
            f"created ordered feed {self.feed} into dc-b's"
        )
        app = FollowingTransfers(a.uri, "public", "dc-a", ACCOUNTS, pause_s=1 / self.rate)
        app.start()
        try:
            self._drill(procs, api, a, b_uri, app, summary)
        finally:
            app.stop.set()
            app.join(30)
        summary.committed = {side: len(ids) for side, ids in app.committed.items()}
        summary.errors = app.errors
        return summary

    def _drill(
        self,
        procs: Processes,
        api: CoordinatorClient,
        a: captured.CapturedDatabase,
        b_uri: str,
        app: FollowingTransfers,
        summary: DrSummary,
    ) -> None:
        wait_until(lambda: len(_ids(b_uri)) >= 100, TIMEOUT_S, "100 transfers on dc-b")
        self.say(f"the bank writes to dc-a for {self.seconds:.0f} s ...")
        time.sleep(self.seconds)
        self.say("losing dc-a: killing its broker, stopping its database")
        stack.stop("dc-a", hard=True)
        time.sleep(2)  # dc-a's database commits what never leaves it
        source = postgres.source(active_active=True)
        source.stop()
        began = time.monotonic()
        report = api.request("POST", "/v1/failover", {"feed": self.feed})
        summary.failover_s = time.monotonic() - began
        held = set(_ids(b_uri))
        tail = set(app.on("dc-a")) - held
        summary.lost = len(tail)
        summary.consistency_ts_us = int(report["consistency_ts_us"])
        summary.rpo_reported = int(report["rpo"]["transactions"])
        summary.rpo_at_failover = report["rpo"]["text"]
        self.say(
            f"failed over in {summary.failover_s:.1f} s: dc-b's database holds dc-a's as of "
            f"{summary.consistency_ts_us}; RPO {summary.rpo_at_failover}; the application's "
            f"log says {summary.lost} transfers never reached dc-b"
        )
        app.move(b_uri, "public", "dc-b")
        self.say(f"the bank writes to dc-b for {self.seconds:.0f} s; dc-a comes back ...")
        time.sleep(self.seconds)
        _regain_dc_a()
        source.start()
        wait_until(source.answers, 120, "dc-a's database")
        self.say("waiting for Debezium to deliver what dc-a's database committed meanwhile ...")
        applied = takeover.debezium_order(str(report["last_txn"])) or 0
        wait_until(lambda: _delivered(a, applied) >= summary.lost, TIMEOUT_S, "Debezium on dc-a")
        exact = api.request("POST", "/v1/failover", {"feed": self.feed})
        summary.rpo_exact_later = int(exact["rpo"]["transactions"])
        self.say(f"with dc-a back the failover report is exact: RPO {exact['rpo']['text']}")
        back = api.request(
            "POST",
            "/v1/failback/database",
            {
                "feed": self.feed,
                "source_database": a.uri,
                "source_connect": stack.connect_worker().url,
                "reverse_connect": stack.connect_worker_b().url,
                "source_connector": a.name,
            },
        )
        summary.tail_listed = int(back["divergent_transactions"])
        with psycopg.connect(a.uri, autocommit=True) as conn:
            listed = conn.execute(
                "SELECT (after->>'id')::bigint FROM public.crossfeed_divergent "
                "WHERE tbl = 'public.transfers' AND op = 'c'"
            ).fetchall()
        summary.tail_matches = {i for (i,) in listed} == tail and summary.tail_listed == len(tail)
        self.say(
            f"failback: {summary.tail_listed} divergent transactions kept in {back['kept_in']}; "
            "re-seeded dc-a from dc-b: "
            + ", ".join(f"{r['table']} -{r['deleted']} +{r['written']}" for r in back["reseeded"])
        )
        reverse = back["reverse_feed"]
        procs.created(api, reverse)
        self.say(f"failback created ordered feed {reverse} (dc-b -> dc-a); starting it")
        self._start(procs, api, reverse)
        since_us = int(time.time() * 1e6)
        wait_until(
            lambda: int(_feed_status(api, reverse).get("consistency_ts_us") or 0) >= since_us,
            TIMEOUT_S,
            f"{reverse} to bring dc-a level",
        )
        self.say(f"{reverse} runs dc-b -> dc-a; switching over back to dc-a ...")
        switched = api.request(
            "POST",
            "/v1/switchover",
            {
                "feed": reverse,
                "source_database": b_uri,
                "source_connect": stack.connect_worker_b().url,
                "reverse_connect": stack.connect_worker().url,
                "reverse_cluster": "dc-a",
            },
        )
        app.move(a.uri, "public", "dc-a again")
        summary.writes_refused_s = float(switched["writes_refused_s"])
        forward = switched["reverse_feed"]
        procs.created(api, forward)
        self.say(f"the switchover created ordered feed {forward} (dc-a -> dc-b); starting it")
        self._start(procs, api, forward)
        self.say(
            f"switched back: dc-a is the primary, writes refused {summary.writes_refused_s:.1f} s, "
            f"RPO 0 checked on {len(switched['tables'])} tables; {forward} runs dc-a -> dc-b"
        )
        time.sleep(min(self.seconds, 10.0))
        app.stop.set()
        app.join(30)
        deadline = time.monotonic() + TIMEOUT_S
        differs = _differences(a.uri, b_uri)
        while differs and time.monotonic() < deadline:
            time.sleep(1)
            differs = _differences(a.uri, b_uri)
        summary.equal, summary.differs = not differs, differs

    def _start(self, procs: Processes, api: CoordinatorClient, feed: str) -> None:
        for role in ("puller", "sorter", "sink"):
            procs.start(f"{role}-{feed}", role, "run", "--feed", feed)
        wait_until(
            lambda: bool(_feed_status(api, feed).get("consistency_ts_us")),
            TIMEOUT_S,
            f"feed {feed} to run",
        )

    def _remove(self, a: captured.CapturedDatabase, b_uri: str) -> None:
        """The connectors the drill made and their slots (the databases stay)."""
        for url in (stack.connect_worker().url, stack.connect_worker_b().url):
            with contextlib.suppress(ConnectError):
                for name in connector.names(url):
                    if name == self.database or name.startswith(self.feed):
                        connector.remove(url, name)
        for uri in (a.uri, b_uri):
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(_on_server(uri, "postgres"), autocommit=True) as conn,
            ):
                slots = conn.execute(
                    "SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                    (self.database,),
                ).fetchall()
                captured.drop_slots(conn, [str(s) for (s,) in slots])
        self.say(f"removed the drill's connectors and slots; database {self.database} stays")


def _on_server(uri: str, database: str) -> str:
    return uri.rsplit("/", 1)[0] + f"/{database}"


def _ids(uri: str) -> list[int]:
    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(uri, autocommit=True, connect_timeout=3) as conn,
    ):
        return [i for (i,) in conn.execute("SELECT id FROM public.transfers ORDER BY id")]
    return []


def _regain_dc_a() -> None:
    """Start dc-a's killed broker again. On a busy machine its JVM can take minutes, and it
    is refused while the controller still holds the killed one's registration."""
    try:
        stack.start("dc-a")
    except stack.StackError:
        conf = {"bootstrap.servers": stack.node("dc-a").bootstrap}
        wait_until(lambda: clients.cluster_id(conf, 2.0) is not None, 300, "dc-a to answer")


def _delivered(a: captured.CapturedDatabase, applied_lsn: int) -> int:
    """Transactions in dc-a's Debezium transaction topic committed after ``applied_lsn``
    (a connector task that failed while dc-a was away is started again)."""
    failback.restart_failed(a.connect_url, a.name)
    conf = {"bootstrap.servers": stack.node("dc-a").bootstrap}
    ends = set()
    with contextlib.suppress(KafkaException, TimeoutError):
        topic = [debezium.transaction_topic(a.prefix)]
        for msg in scan.records_since(conf, topic, 0, "crossfeed-demo-dr"):
            with contextlib.suppress(debezium.NotDebezium):
                end = debezium.txn_record(msg.value())
                if end is not None and end.lsn > applied_lsn:
                    ends.add(end.txn_id)
    return len(ends)


def _differences(uri_a: str, uri_b: str) -> list[str]:
    return [c.line() for c in sql_bank.compare(uri_a, uri_b, "public") if not c.equal]
