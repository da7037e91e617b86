"""Every quick start of README.md and docs/cdc.md, command by command, on a fresh stack.

The commands are read from the pages (tests/support/quickstart.py) and run in the order a
newcomer pastes them — the long-lived services as background processes, the Python
examples as programs — on a local stack of the test's own (its own ``$CROSSFEED_HOME``,
ports moved by an offset, a coordinator on a free port). After each step the test checks
what the page promises: copies on dc-b, a failover and a failback whose reports give each
group one verdict and end with what moved where, ``orders`` running again with every task
assigned, the bank's total constant in PostgreSQL, the ``ChangeProducer`` example's rows
there within seconds of its exit, the ledger feed idle with no growing lag once its
producers stopped, and a row written to the captured database in the replica. No service
logs a CRITICAL line, Spark's per-batch "falling behind", or a ``None`` target.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.support.polling import wait_for
from tests.support.quickstart import Step, localize, section, steps
from tests.support.services import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.spark,
    pytest.mark.timeout(1800),
]

OFFSET = int(os.environ.get("CROSSFEED_LOCAL_PORT_OFFSET", "0")) + 1000
"""The test's stack beside the session's (and anyone else's at the usual offsets)."""


class Reader:
    """Runs a page's steps as its reader would, on the test's own stack."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "CROSSFEED_CONFIG"},
            "CROSSFEED_HOME": str(home),
            "CROSSFEED_LOCAL_PORT_OFFSET": str(OFFSET),
            "CROSSFEED_COORDINATOR__PORT": str(self.port),
            "CROSSFEED_SERVER": f"http://127.0.0.1:{self.port}",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.services: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def run(self, step: Step, timeout: float = 300) -> str:
        """A step that ends (a command or a program): its output; it must succeed."""
        text = localize(step.text, OFFSET)
        args = [sys.executable, "-c", text] if step.kind == "python" else ["bash", "-c", text]
        done = subprocess.run(
            args, env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{text!r} exited {done.returncode}:\n{out}"
        return out

    def start(self, step: Step) -> None:
        """A long-lived service, in the background, its log kept."""
        log = self.home / f"service-{len(self.services)}.log"
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {localize(step.text, OFFSET)}"],
            env=self.env,
            cwd=self.home,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.services.append((step.text, proc, log))

    def step(self, step: Step, timeout: float = 300) -> str:
        if step.long_lived:
            self.start(step)
            if step.text.startswith("crossfeed coordinator run"):
                wait_for(lambda: self.status() is not None, 90, "the coordinator to lead", 1.0)
            return ""
        return self.run(step, timeout)

    def status(self) -> dict[str, Any] | None:
        done = subprocess.run(
            ["crossfeed", "status", "--json"],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            return None
        data: dict[str, Any] = json.loads(done.stdout)
        return data if data["ha"]["leader"] else None

    def feed(self, name: str) -> dict[str, Any] | None:
        status = self.status() or {"feeds": []}
        return next((f for f in status["feeds"] if f["name"] == name), None)

    def logs(self) -> dict[str, str]:
        return {text: log.read_text(errors="replace") for text, _, log in self.services}

    def stop(self) -> None:
        for _, proc, _ in reversed(self.services):
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in self.services:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def bootstrap(port: int) -> str:
    return f"127.0.0.1:{port + OFFSET}"


def count_records(port: int, topic: str, partitions: int) -> int:
    """Committed records of ``topic`` (copies are written in transactions: the offsets
    count their markers too)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(port),
            "group.id": "quickstart-count",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        total, quiet_since = 0, time.monotonic()
        while time.monotonic() - quiet_since < 2:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                total += 1
                quiet_since = time.monotonic()
        return total
    finally:
        consumer.close()


def pg(port: int) -> str:
    return f"postgresql://crossfeed@127.0.0.1:{port + OFFSET}/crossfeed"


def query(port: int, sql: str) -> list[tuple[Any, ...]]:
    try:
        with psycopg.connect(pg(port), autocommit=True) as conn:
            return conn.execute(sql).fetchall()
    except psycopg.errors.UndefinedTable:
        return []


def verdicts(report: str, group: str) -> list[str]:
    """The lines of a failover or failback report that give ``group`` its verdict."""
    flat = re.sub(r"\s*\n\s*", " ", report)  # rich wraps long lines
    return re.findall(rf"group {group}: [^.;]*(?:;[^.]*)?", flat)


@pytest.fixture
def reader() -> Iterator[Reader]:
    home = Path(tempfile.mkdtemp(prefix="crossfeed-quickstart-"))
    home.chmod(0o755)  # the local PostgreSQL runs as user postgres when the test is root
    made = Reader(home)
    try:
        yield made
    finally:
        made.stop()
        subprocess.run(
            ["crossfeed", "local", "down"], env=made.env, cwd=home, timeout=120, check=False
        )
        shutil.rmtree(home, ignore_errors=True)


def test_every_quick_start_runs_as_written_on_a_fresh_stack(reader: Reader) -> None:
    try:
        follow_the_pages(reader)
    except BaseException:
        for service, log in reader.logs().items():
            print(f"--- {service}\n{log[-4000:]}")
        raise


def follow_the_pages(reader: Reader) -> None:
    mirror(reader, steps(section("README.md", "Quick start: a mirror feed")))
    ordered(reader, steps(section("README.md", "Quick start: an ordered feed")))
    readme_cdc = steps(section("README.md", "Quick start: a PostgreSQL database"))
    assert steps(section("docs/cdc.md", "Try it")) == readme_cdc  # one path, not two
    cdc(reader, readme_cdc)
    for service, log in reader.logs().items():
        lines = log.splitlines()
        assert not [line for line in lines if " CRITICAL " in line], (service, log[-3000:])
        assert "Current batch is falling behind" not in log, service
        assert "-> None)" not in log, service


def mirror(reader: Reader, page: list[Step]) -> None:
    texts = [s.text for s in page]
    assert texts[0] == "crossfeed local up"
    for step in page[: texts.index("crossfeed local stop dc-a --kill")]:
        reader.step(step)
        if step.kind == "python":  # the example's 1,000 orders, copied to dc-b
            wait_for(lambda: count_records(29092, "orders.eu", 4) == 1000, 90, "the copies", 1.0)
    reader.run(Step("sh", "crossfeed local stop dc-a --kill"))
    failover = reader.run(Step("sh", "crossfeed failover --feed orders"))
    print(failover)
    said = verdicts(failover, "billing")
    assert len(said) == 1, failover
    assert said[0].startswith(("group billing: moved to dc-b", "group billing: already at")), said
    assert "nothing exact to move" not in failover
    flat = re.sub(r"\s+", " ", failover)
    assert "failover of orders done: dc-a -> dc-b stopped; group(s) billing resume" in flat
    reader.run(Step("sh", "crossfeed local start dc-a"))
    back = reader.run(Step("sh", "crossfeed failback --feed orders --wait 90"), timeout=300)
    print(back)
    said = verdicts(back, "billing")
    assert len(said) == 1 and "dc-a" in said[0], back
    flat = re.sub(r"\s+", " ", back)
    assert "failback of orders done: group(s) billing back on dc-a" in flat, back
    assert "orders replicates dc-a -> dc-b again" in flat, back

    def settled() -> bool:
        forward = reader.feed("orders")
        reverse = reader.feed("orders-reverse")
        return (
            forward is not None
            and forward["state"] == "normal"
            and all(t["owner"] for t in forward["tasks"])
            and (reverse is None or all(t["owner"] for t in reverse["tasks"]))
        )

    wait_for(settled, 60, "orders running again with every task assigned", 1.0)


def ordered(reader: Reader, page: list[Step]) -> None:
    texts = [s.text for s in page]
    assert texts[0].startswith("crossfeed workload bank --topic bank")
    for step in page:
        if step.kind == "python":
            break
        reader.step(step, timeout=180)
    total = wait_for(
        lambda: (
            (rows := query(25432, "SELECT count(*), sum(balance) FROM ledger.accounts"))
            and rows[0][0] == 1000
            and rows[0][1]
        ),
        240,
        "the bank's accounts in PostgreSQL",
        1.0,
    )
    for _ in range(5):  # the total never changes
        assert query(25432, "SELECT sum(balance) FROM ledger.accounts")[0][0] == total
        time.sleep(0.2)
    example = next(s for s in page if s.kind == "python")
    reader.run(example)
    exited = time.monotonic()
    wait_for(
        lambda: len(query(25432, "SELECT id FROM ledger.payments")) == 2,
        30,
        "the ChangeProducer example's two rows in ledger.payments",
        every=0.2,
    )
    arrived = time.monotonic() - exited
    print(f"the example's transaction reached PostgreSQL {arrived:.1f}s after it exited")
    idle = wait_for(
        lambda: (f := reader.feed("ledger")) and f["idle_since_us"] and f,
        90,
        "the ledger feed to report its source idle",
        1.0,
    )
    assert idle["lag_s"] == 0.0, idle
    consistency = idle["consistency_ts_us"]
    for _ in range(5):  # lag does not grow, consistency_ts never goes back
        time.sleep(2)
        now = reader.feed("ledger")
        assert now is not None and now["idle_since_us"] and now["lag_s"] == 0.0, now
        assert now["consistency_ts_us"] >= consistency
        consistency = now["consistency_ts_us"]
    shown = reader.run(Step("sh", "crossfeed status"))
    assert "ledger: source idle since" in shown, shown


def cdc(reader: Reader, page: list[Step]) -> None:
    assert page[0].text == "crossfeed local up --cdc"
    for step in page:
        if "SELECT * FROM replica.accounts" in step.text:
            wait_for(
                lambda: (
                    query(25432, "SELECT id, balance FROM replica.accounts ORDER BY id")
                    == [(1, 100), (2, 50)]
                ),
                180,
                "the captured rows in replica.accounts",
                1.0,
            )
        out = reader.step(step, timeout=300)
        if "SELECT * FROM replica.accounts" in step.text:
            assert "(2 rows)" in out, out
