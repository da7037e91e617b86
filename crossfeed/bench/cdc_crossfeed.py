"""crossfeed's side of the CDC benchmark: a database of the source PostgreSQL captured by
Debezium on the local Connect worker, an ordered feed with ``input: debezium`` (puller
with its Debezium reader, Spark sorter, PostgreSQL sink) into a schema of its own on the target.

The connector is registered before the backlog is written, so the backlog is streamed
(only the opening accounts come by Debezium's snapshot); the feed's processes start once
Debezium has published the whole backlog, so what is measured is crossfeed applying a
backlog that waits in Kafka (``capture_s`` says how long Debezium trailed the writer).

``format``: the connector's, json (Connect's JSON converter, the schema in every event) or
avro (Confluent's wire format against the local stack's schema registry); the side's
``bytes_per_event`` are what Debezium wrote per event on each table's topic."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import psycopg
from confluent_kafka import TopicPartition

from crossfeed.bench.cdc_watch import execute_quietly
from crossfeed.bench.cdc_watch import on_server as _server
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.ordered import Pipeline
from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.kafka import clients
from crossfeed.local import captured, postgres, stack
from crossfeed.workload import sql_bank

ROLES = ("puller", "sorter", "sink")


SAMPLED_EVENTS = 5000  # events read of each table's topic for bytes_per_event


class CrossfeedSide:
    def __init__(
        self, janitor: Janitor, a: dict[str, Any], b: dict[str, Any], format: str = "json"
    ) -> None:
        self.janitor, self.a, self.b = janitor, a, b
        self.format = format
        self.name = "crossfeed" if format == "json" else f"crossfeed_{format}"
        self.registry = stack.registry().url
        self.db = f"bench_cdc_{uuid.uuid4().hex[:6]}"
        self.prefix = self.db.replace("_", "-")
        self.source_uri = _server(postgres.SOURCE_URI, self.db)
        self.target_uri = postgres.URI
        self.schema = self.db
        self.connect_url = stack.connect_worker().url
        self.pipeline: Pipeline | None = None
        janitor.topics(
            a,
            [
                f"{self.prefix}.public.accounts",
                f"{self.prefix}.public.transfers",
                f"{self.prefix}.transaction",
                f"__debezium-heartbeat.{self.prefix}",
            ],
        )

    def prepare(self, accounts: int) -> int:
        """The source database with the bank's tables, captured (snapshot of the opening
        accounts done); returns the total balance."""
        with psycopg.connect(_server(postgres.SOURCE_URI, "postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db}"')
        total = sql_bank.create(self.source_uri, accounts)
        config = connector.connector_config(
            self.source_uri,
            self.prefix,
            heartbeat_ms=1000,
            format=self.format,
            registry_url=self.registry,
        )
        connector.register(self.connect_url, self.db, config)
        connector.wait_running(self.connect_url, self.db, 90)
        return total

    def capture_pids(self) -> dict[str, int]:
        pid = stack.connect_worker().pid()
        return {"connect (Debezium)": pid} if pid else {}

    def after_backlog(self, transfers: int) -> dict[str, Any]:
        """Until Debezium's transaction topic holds the backlog's BEGIN and END records."""
        began = time.monotonic()
        topic = f"{self.prefix}.transaction"
        consumer = clients.consumer(self.a, **{"group.id": f"bench-cdc-{self.db}"})
        try:
            high = 0
            while time.monotonic() < began + 900:
                with contextlib.suppress(Exception):  # not created yet
                    high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
                if high >= 2 * transfers:
                    return {
                        "capture_s": round(time.monotonic() - began, 2),
                        "bytes_per_event": self._bytes_per_event(),
                    }
                time.sleep(0.2)
        finally:
            consumer.close()
        raise RuntimeError(f"Debezium published {high // 2} of {transfers} transactions")

    def _bytes_per_event(self) -> dict[str, float]:
        """Key and value bytes per event on each table's topic (the first events)."""
        out = {}
        for table in ("accounts", "transfers"):
            topic = f"{self.prefix}.public.{table}"
            consumer = clients.consumer(self.a, **{"group.id": f"bench-cdc-bytes-{self.db}"})
            try:
                consumer.assign([TopicPartition(topic, 0, 0)])
                sizes: list[int] = []
                deadline = time.monotonic() + 60
                while len(sizes) < SAMPLED_EVENTS and time.monotonic() < deadline:
                    batch = consumer.consume(1000, 1.0)
                    if not batch:
                        break
                    sizes += [len(m.value() or b"") + len(m.key() or b"") for m in batch]
                out[table] = round(sum(sizes) / len(sizes), 1) if sizes else 0.0
            finally:
                consumer.close()
        return out

    def start(self) -> dict[str, int]:
        self.pipeline = Pipeline(
            self.janitor,
            self.a,
            self.b,
            rf"{self.prefix}\.public\..*",
            f"{self.target_uri}?schema={self.schema}",
            roles=ROLES,
            options={"input": "debezium"}
            | ({"schema.registry.url": self.registry} if self.format == "avro" else {}),
        )
        return self.pipeline.start() | self.capture_pids()

    def logs(self) -> str:
        return self.pipeline.logs() if self.pipeline else "(not started)"

    def cleanup(self) -> None:
        if self.pipeline:
            self.pipeline.stop()
        with contextlib.suppress(ConnectError):
            connector.remove(self.connect_url, self.db)
        admin = _server(postgres.SOURCE_URI, "postgres")
        with contextlib.suppress(psycopg.Error), psycopg.connect(admin, autocommit=True) as conn:
            captured.drop_slots(conn, [config_slot(self.prefix)])
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
        execute_quietly(self.target_uri, f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def config_slot(prefix: str) -> str:
    return connector.connector_config("postgresql://u@h/d", prefix)["slot.name"]
