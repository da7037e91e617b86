"""crossfeed's side of the disaster-recovery benchmark: the source database captured by
Debezium on Connect-A into dc-a, an ordered feed with ``input: debezium`` (puller, Spark
sorter, PostgreSQL sink, each a process as an operator starts it, every setting at its
default) into the target database, then

* **failover**: ``POST /v1/failover`` of that feed (its feed file's fields in the body, as
  ``crossfeed failover --feed F --feed-file F.yaml`` sends them) to the failover routes
  mounted in a FastAPI app of the benchmark's own, as the coordinator mounts them;
* **switchover**: ``crossfeed.dr.switchover.run``, what ``POST /v1/switchover`` runs, with
  the reverse connector registered on Connect-B. The reverse feed it creates is recorded,
  not run: what is measured ends when the application writes to the new primary."""

from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.request
from typing import Any

import psycopg
import yaml
from fastapi import FastAPI

from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.dr_figures import steps
from crossfeed.bench.dr_stage import TABLES, Stage
from crossfeed.bench.ordered import Pipeline
from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.config.loader import load_settings
from crossfeed.core.switchover import reverse_name
from crossfeed.dr import switchover
from crossfeed.feeds import FeedSpec, load_feed_file
from crossfeed.local import stack
from crossfeed.services.coordinator.failover import FailoverHooks, make_router
from crossfeed.services.coordinator.rest_server import RestServer

ROLES = ("puller", "sorter", "sink")
STEPS = (
    ("freezing", "checks"),
    ("drained", "freeze, drain, compare"),
    ("takes writes", "sequences, fence, reverse capture"),
)
"""The switchover's progress lines (their start or a word in them) and the step each
one ends."""
FAILOVER_TIMEOUT_S = 120.0


def _debezium_topics(prefix: str) -> list[str]:
    return [f"{prefix}.public.{t}" for t in TABLES] + [
        f"{prefix}.transaction",
        f"__debezium-heartbeat.{prefix}",
    ]


class CrossfeedDr:
    name = "crossfeed"

    def __init__(
        self, janitor: Janitor, a: dict[str, Any], b: dict[str, Any], stage: Stage
    ) -> None:
        self.janitor, self.a, self.b, self.stage = janitor, a, b, stage
        self.prefix = stage.db.replace("_", "-")
        self.feed = f"{self.prefix}-feed"
        self.reverse = reverse_name(self.feed)
        self.connect_a = stack.connect_worker().url
        self.connect_b = stack.connect_worker_b().url
        self.pipeline: Pipeline | None = None
        self.created: list[dict[str, Any]] = []  # the reverse feed's body
        self.server: RestServer | None = None
        janitor.topics(a, _debezium_topics(self.prefix))
        janitor.topics(b, _debezium_topics(self.reverse))

    def setup(self) -> None:
        """Both databases equal, the source's connector (no snapshot: they are equal), the
        feed's three processes."""
        self.stage.create()
        tables = [f"public\\.{t}" for t in TABLES]
        config = connector.connector_config(
            self.stage.source_uri, self.prefix, tables=tables, snapshot_mode="no_data"
        )
        connector.register(self.connect_a, self.prefix, config)
        connector.wait_running(self.connect_a, self.prefix, 120)
        self.pipeline = Pipeline(
            self.janitor,
            self.a,
            self.b,
            [rf"{re.escape(self.prefix)}\.public\.({'|'.join(TABLES)})"],
            f"{self.stage.target_uri}?schema=public",
            roles=ROLES,
            options={"input": "debezium", "debezium.topic.prefix": self.prefix},
            feed=self.feed,
        )
        self.pipeline.start()

    def _pipeline(self) -> Pipeline:
        if self.pipeline is None:
            raise RuntimeError("the feed was not started")
        return self.pipeline

    def logs(self) -> str:
        return self.pipeline.logs() if self.pipeline else "(the feed was not started)"

    # -- failover ---------------------------------------------------------------------------

    def prepare_failover(self) -> None:
        """The failover routes in an app of the benchmark's own, serving before the source
        is lost."""
        hooks = FailoverHooks(load_settings(self._pipeline().config))
        app = FastAPI()
        app.include_router(make_router(hooks))
        self.server = RestServer(app, "127.0.0.1", 0).start()

    def failover(self) -> dict[str, Any]:
        """``POST /v1/failover`` of the feed; figures of its report."""
        pipeline, server = self._pipeline(), self.server
        if server is None:
            raise RuntimeError("the failover routes are not served (prepare_failover)")
        body = {"feed": self.feed, "feed_spec": yaml.safe_load(pipeline.feed_file.read_text())}
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/v1/failover",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=FAILOVER_TIMEOUT_S) as answer:
            report = json.loads(answer.read())
        rpo = report["rpo"]
        return {
            "rpo_reported": rpo["transactions"],
            "rpo_exact": rpo["exact"],
            "rpo_known_from": rpo["known_from"],
            "rpo_span_s": rpo["span_s"],
            "sinks_ended": report["sinks_ended"],
            "notes": report["notes"],
        }

    # -- switchover -------------------------------------------------------------------------

    def switchover(self) -> dict[str, Any]:
        """``crossfeed switchover`` of the feed; figures of its report."""
        request = switchover.SwitchoverRequest(
            feed=self.feed,
            source_database=self.stage.source_uri,
            source_connect=self.connect_a,
            reverse_connect=self.connect_b,
            reverse_cluster="dc-b",
            source_connector=self.prefix,
            reverse_name=self.reverse,
            drain_timeout_s=120.0,
        )
        marks: list[tuple[str, float]] = []

        def mark(line: str) -> None:  # the switchover's progress lines, each a step's end
            for start, label in STEPS:
                if line.startswith(start) or f" {start}" in line:
                    marks.append((label, time.monotonic()))

        began = time.monotonic()
        report = switchover.run(request, _Feeds(self), lambda _spec: "dc-b", mark)
        marks.append(("reverse connector and feed; the old capture removed", time.monotonic()))
        return {
            "steps_s": steps(began, marks),
            "writes_refused_s": report.writes_refused_s,
            "took_s": report.took_s,
            "rpo_transactions": report.rpo_transactions,
            "sessions_ended": report.sessions_ended,
            "tables": [f"{t.table}: {t.rows} rows" for t in report.tables],
        }

    # -- afterwards -------------------------------------------------------------------------

    def stop_feed(self) -> None:
        if self.pipeline is not None:
            self.pipeline.stop()

    def cleanup(self) -> None:
        """The failover routes, the feed's processes, both connectors (their slots go with
        the databases)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.stop_feed()
        for url, name in ((self.connect_a, self.prefix), (self.connect_b, self.reverse)):
            with contextlib.suppress(ConnectError):
                if name in connector.names(url):
                    connector.remove(url, name)
        with contextlib.suppress(psycopg.Error):
            self.stage.drop()


class _Feeds:
    """The switchover's feeds: the one the benchmark started from its feed file; the
    reverse feed is recorded, its services are not started."""

    def __init__(self, side: CrossfeedDr) -> None:
        self.side = side

    def spec(self, name: str) -> FeedSpec | None:
        pipeline = self.side.pipeline
        if name != self.side.feed or pipeline is None:
            return None
        return load_feed_file(pipeline.feed_file)

    def retire(self, name: str) -> None:
        """As the coordinator removes a feed: its processes are told to stop, not waited
        for (the switchover has fenced the target, so the sink cannot write anyway)."""
        if self.side.pipeline is not None:
            for proc in self.side.pipeline.procs.values():
                proc.terminate()

    def put_feed(self, body: dict[str, Any]) -> str:
        self.side.created.append(body)
        return "created (its services are not started by the benchmark)"
