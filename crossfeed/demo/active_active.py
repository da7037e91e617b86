"""``crossfeed demo --active-active``: two PostgreSQL databases both taking writes, kept
equal by an active-active pair (docs/active-active.md).

The local stack runs with both sides captured (``local up --active-active``). A fresh
database of the same name on each server gets the SQL bank's tables (accounts and a
transfers ledger; crossfeed/workload/sql_bank.py) with the same opening accounts; the
ledger's ids come from disjoint sequences (odd on dc-a, even on dc-b), since both sides
insert into it. A coordinator makes the pair (``POST /v1/pairs``: both Debezium
connectors, both ordered feeds, ``accounts.balance`` a counter), and each direction gets its
puller, sorter and sink. Then the bank runs on both databases at once — transfers over the
same accounts from both sides — while a sampler on each side checks that the total
balance never changes there. At the end: both databases equal row for row, the total
balance the opening total on both, the conflicts each side counted, and no transaction
sent back (each direction's Debezium stream holds only its own side's writes).

Every process is stopped at the end, Ctrl-C included, and the pair removed (connectors,
feeds, replication slots); both databases ``demo_aa_<run>`` stay for a look.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlencode

import psycopg
from confluent_kafka import TopicPartition

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.core.pair_plan import feed_names
from crossfeed.demo.ordered import BankDemo, _feed_status, demo_processes, start_coordinator
from crossfeed.demo.scenario import Processes
from crossfeed.kafka import clients
from crossfeed.local import captured, postgres, stack
from crossfeed.pair import sql
from crossfeed.wire import debezium, topics
from crossfeed.workload import sql_bank

ACCOUNTS = 50
SESSIONS = 2  # per side
CATCH_UP_TIMEOUT_S = 240.0
SIDES = ("dc-a", "dc-b")


@dataclass
class ActiveActiveSummary:
    transactions: dict[str, int] = field(default_factory=dict)  # transfers written per side
    equal: bool = False  # both databases, row for row (accounts and transfers)
    differs: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)  # sum(balance) per side at the end
    opening_total: int = 0
    conflicts: dict[str, int] = field(default_factory=dict)  # changes lost, per applying side
    sent_back: int = 0  # changes a sink wrote that a Debezium stream carried on
    samples: dict[str, int] = field(default_factory=dict)
    torn: list[str] = field(default_factory=list)
    seconds_to_converge: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        totals_hold = all(t == self.opening_total for t in self.totals.values())
        return (
            self.equal
            and totals_hold
            and not self.sent_back
            and not self.torn
            and not self.errors
            and all(self.samples.values())
        )

    def lines(self) -> list[str]:
        lines = [
            f"transfers written on {side:<27} {n:>8,}" for side, n in self.transactions.items()
        ]
        lines += [
            f"databases equal, row for row         {'yes' if self.equal else 'NO':>8}",
            *(
                f"sum(balance) on {side} (opening {self.opening_total:,}) {total:>8,}"
                for side, total in self.totals.items()
            ),
            *(
                f"conflicts lost, applied on {side:<9} {n:>8,}"
                for side, n in self.conflicts.items()
            ),
            f"transactions sent back               {self.sent_back:>8,}",
            *(f"samples of {side} (total unchanged)   {n:>8,}" for side, n in self.samples.items()),
            f"torn samples                         {len(self.torn):>8,}",
            f"converged after the last transfer    {self.seconds_to_converge:>8.1f} s",
        ]
        lines += [f"differs: {line}" for line in self.differs]
        lines += [f"torn: {torn}" for torn in self.torn[:3]]
        lines += [f"workload error: {err}" for err in self.errors]
        return lines

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["ok"] = self.ok
        return found


@dataclass
class ActiveActiveDemo(BankDemo):
    rate: float = 50.0  # transfers per second on each side

    @property
    def name(self) -> str:
        """The pair's name (its connectors', topic prefixes' and feeds' stem)."""
        return f"demo-aa-{self.run_id}"

    @property
    def database(self) -> str:
        return f"demo_aa_{self.run_id}"

    def run(self) -> ActiveActiveSummary:
        self.say(
            "starting the local stack with both sides captured (dc-a, dc-b, both PostgreSQL "
            "servers, Kafka Connect with Debezium on each side) ..."
        )
        stack.up(postgres=True, cdc=True, active_active=True)
        servers = (postgres.source(active_active=True), postgres.target(active_active=True))
        uris = tuple(server.create_database(self.database) for server in servers)
        try:
            with demo_processes("crossfeed-demo-aa-", self.say) as procs:
                return self._run(procs, uris[0], uris[1])
        finally:
            self._remove(servers)

    def _run(self, procs: Processes, uri_a: str, uri_b: str) -> ActiveActiveSummary:
        total = 0
        for odd, uri in ((True, uri_a), (False, uri_b)):
            total = sql_bank.create(uri, ACCOUNTS)
            sql_bank.disjoint_ids(uri, odd)
        self.say(
            f"database {self.database} on both servers: {ACCOUNTS} accounts (total "
            f"{total:,}) and an empty ledger whose ids are odd on dc-a, even on dc-b"
        )
        leader = start_coordinator(procs)
        # making a pair waits for DDL on both databases and both Connect clusters
        api = CoordinatorClient(leader.servers[0], timeout_s=180.0)
        answer = api.request(
            "POST",
            "/v1/pairs",
            {
                "name": self.name,
                "a_database": uri_a,
                "b_database": uri_b,
                "tables": ["public.accounts", "public.transfers"],
                "all_tables": False,
                "schema": "public",
                "counters": ["accounts.balance"],
                "allow_unsafe": False,
                "a_cluster": SIDES[0],
                "b_cluster": SIDES[1],
                "connect_a": stack.connect_worker().url,
                "connect_b": stack.connect_worker_b().url,
                "snapshot": "initial",
            },
        )
        feeds = feed_names(self.name)
        for line in (answer or {}).get("done", [])[:8]:
            self.say(f"  {line}")
        self.say(
            f"pair {self.name}: connectors {self.name}-a (dc-a) and {self.name}-b (dc-b), "
            f"feeds {feeds[0]} and {feeds[1]}; accounts.balance is a counter"
        )
        for feed in feeds:
            procs.start(f"puller-{feed}", "puller", "run", "--feed", feed)
            procs.start(f"sorter-{feed}", "sorter", "run", "--feed", feed)
            procs.start(f"sink-{feed}", "sink", "run", "--feed", feed)
        samplers = {
            side: sql_bank.Sampler(uri, "public", ACCOUNTS, total)
            for side, uri in zip(SIDES, (uri_a, uri_b), strict=True)
        }
        workloads = {
            side: sql_bank.Transfers(uri, ACCOUNTS, sessions=SESSIONS, rate=self.rate)
            for side, uri in zip(SIDES, (uri_a, uri_b), strict=True)
        }
        began = time.monotonic()
        try:
            for sampler in samplers.values():
                sampler.start()
            self._wait_running(api, feeds, began)
            for workload in workloads.values():
                workload.start()
            self.say(
                f"SQL bank on both databases at once: {SESSIONS} sessions a side, "
                f"{self.rate:.0f} transfers/s a side for {self.seconds:.0f} s, over the same "
                "accounts; a sampler on each side checks sum(balance)"
            )
            writing = time.monotonic()
            while time.monotonic() - writing < self.seconds:
                if any(w.errors for w in workloads.values()):
                    break
                self._show(api, feeds, (uri_a, uri_b), samplers, began)
                time.sleep(1)
            for workload in workloads.values():
                workload.stop.set()
            for workload in workloads.values():
                workload.join(30)
            finished = time.monotonic()
            differs = _differences(uri_a, uri_b)
            while differs and time.monotonic() - finished < CATCH_UP_TIMEOUT_S:
                self._show(api, feeds, (uri_a, uri_b), samplers, began)
                time.sleep(1)
                differs = _differences(uri_a, uri_b)
            converged = time.monotonic() - finished
            self._show(api, feeds, (uri_a, uri_b), samplers, began)
            time.sleep(1)
        finally:
            for workload in workloads.values():
                workload.stop.set()
            for sampler in samplers.values():
                if sampler.ident is not None:
                    sampler.stop()
        summary = ActiveActiveSummary(
            transactions={side: w.done for side, w in workloads.items()},
            equal=not differs,
            differs=differs,
            totals={side: _total(uri) for side, uri in zip(SIDES, (uri_a, uri_b), strict=True)},
            opening_total=total,
            conflicts={
                side: _conflicts(uri) for side, uri in zip(SIDES, (uri_a, uri_b), strict=True)
            },
            sent_back=sum(_sent_back(side, feed) for side, feed in zip(SIDES, feeds, strict=True)),
            samples={side: s.samples for side, s in samplers.items()},
            torn=[f"{side}: {t}" for side, s in samplers.items() for t in s.torn],
            seconds_to_converge=converged,
            errors=[e for w in workloads.values() for e in w.errors],
        )
        query = urlencode(
            {"connect_a": stack.connect_worker().url, "connect_b": stack.connect_worker_b().url}
        )
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"/v1/pairs/{self.name}?{query}")
            self.say(f"removed pair {self.name}: both feeds and both connectors")
        return summary

    def _wait_running(self, api: CoordinatorClient, feeds: tuple[str, str], began: float) -> None:
        """Until both directions publish a consistency_ts (each snapshot applied)."""
        while time.monotonic() - began < CATCH_UP_TIMEOUT_S:
            states = [_feed_status(api, feed) for feed in feeds]
            if all(s.get("consistency_ts_us") for s in states):
                self.say(f"both directions running after {time.monotonic() - began:.0f} s")
                return
            time.sleep(1)
        raise TimeoutError(f"the pair's feeds did not start within {CATCH_UP_TIMEOUT_S:.0f}s")

    def _show(
        self,
        api: CoordinatorClient,
        feeds: tuple[str, str],
        uris: tuple[str, str],
        samplers: dict[str, sql_bank.Sampler],
        began: float,
    ) -> None:
        self.progress(
            {
                "elapsed": time.monotonic() - began,
                "directions": [_feed_status(api, feed) for feed in feeds],
                "sides": [_counts(uri) for uri in uris],
                "conflicts": [_conflicts(uri) for uri in uris],
                "samples": sum(s.samples for s in samplers.values()),
                "torn": sum(len(s.torn) for s in samplers.values()),
            }
        )

    def _remove(self, servers: tuple[postgres.Postgres, postgres.Postgres]) -> None:
        """What removing the pair leaves behind that the demo made: its connectors (if the
        pair's removal did not run) and its replication slots."""
        for worker, letter in ((stack.connect_worker(), "a"), (stack.connect_worker_b(), "b")):
            with contextlib.suppress(ConnectError):
                connector.remove(worker.url, f"{self.name}-{letter}")
        slots = [f"crossfeed_{self.name.replace('-', '_')}_{letter}" for letter in "ab"]
        for server in servers:
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(server.database_uri("postgres"), autocommit=True) as conn,
            ):
                captured.drop_slots(conn, slots)
                captured.drop_origins(conn, [sql.origin(f) for f in feed_names(self.name)])
        self.say(
            f"removed the pair's connectors, replication slots and origins; database "
            f"{self.database} stays on both servers"
        )


def _differences(uri_a: str, uri_b: str) -> list[str]:
    """What differs between the two databases' bank tables (hidden columns aside)."""
    return [c.line() for c in sql_bank.compare(uri_a, uri_b, "public") if not c.equal]


def _total(uri: str) -> int:
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(balance), 0) FROM accounts").fetchone()
    return int(row[0]) if row else 0


def _conflicts(uri: str) -> int:
    with contextlib.suppress(psycopg.Error), psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM crossfeed_conflicts").fetchone()
        return int(row[0]) if row else 0
    return 0


def _counts(uri: str) -> tuple[int, int] | None:
    with contextlib.suppress(psycopg.Error):
        with psycopg.connect(uri, autocommit=True, connect_timeout=2) as conn:
            seen = sql_bank.sample(conn, "public")
        return seen.accounts, seen.transfers
    return None


def _sent_back(side: str, feed: str) -> int:
    """Changes in ``feed``'s Debezium stream (on its source cluster ``side``) that a
    crossfeed sink wrote: each would be a transaction sent back."""
    node = next(c for c in stack.CLUSTERS if c.alias == side)
    config = {"bootstrap.servers": node.bootstrap}
    consumer = clients.consumer(config, **{"group.id": f"demo-aa-check-{feed}"})
    found = 0
    try:
        consumer.assign([TopicPartition(topics.debezium_ordered(feed), 0, 0)])
        quiet = 0
        while quiet < 3:
            msg = consumer.poll(1.0)
            if msg is None:
                quiet += 1
                continue
            if msg.error() or not (msg.value() or b"").startswith(b"{"):
                continue
            with contextlib.suppress(debezium.NotDebezium):
                if debezium.is_crossfeed_origin(debezium.data_event(msg.value()).origin):
                    found += 1
    finally:
        consumer.close()
    return found
