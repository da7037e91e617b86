"""Consumers people really run, as processes a failover test starts, kills and restarts.

Each :class:`AppProcess` runs one client program with a fixed command line and
environment; only the bootstrap servers differ between data centers. Every record the
program handles is a line on its standard output (kept in a file per start), which
:meth:`AppProcess.records` parses into ``(partition, value)`` pairs; a value names its
record (``<partition>:<n>``), so what was read on dc-a and on dc-b can be compared
although the copies sit at other offsets.

* :func:`faust_app`: ``deploy/examples/faust_orders.py``, a faust-streaming worker
  (agent + table), the broker in ``ORDERS_BROKER``.
* :func:`console_consumer`: the Java ``kafka-console-consumer`` from the Kafka jars
  ``make setup`` resolved, with ``--group``.
* :func:`plain_app`: ``tests/support/plain_app.py``, a confluent-kafka consumer.

Processes die with the test run (PR_SET_PDEATHSIG) and are killed at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from crossfeed.bench.jvm import die_with_parent, java

REPO_ROOT = Path(__file__).resolve().parents[2]
FAUST_APP = REPO_ROOT / "deploy" / "examples" / "faust_orders.py"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"

Parse = Callable[[str], tuple[int, str] | None]
_LIVE: set[AppProcess] = set()


@atexit.register
def _kill_live() -> None:
    for app in list(_LIVE):
        with contextlib.suppress(Exception):
            app.kill()


class AppProcess:
    """One client program; ``command(bootstrap)`` and ``env(bootstrap)`` make its start."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        command: Callable[[str], list[str]],
        parse: Parse,
        env: Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        self.name = name
        self.workdir = workdir
        self.command = command
        self.parse = parse
        self.env = env or (lambda _b: {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.outputs: list[Path] = []
        self.workdir.mkdir(parents=True, exist_ok=True)

    def start(self, bootstrap: str) -> AppProcess:
        out = self.workdir / f"{self.name}-{len(self.outputs)}.out"
        self.outputs.append(out)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env(bootstrap)}
        with open(out, "wb") as stdout, open(out.with_suffix(".log"), "wb") as stderr:
            self.proc = subprocess.Popen(
                self.command(bootstrap),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=self.workdir,
                env=env,
                preexec_fn=die_with_parent,
            )
        _LIVE.add(self)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: the program dies with its data center, committing nothing more."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _LIVE.discard(self)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, the way an operator stops it (a clean stop commits); kill -9 after
        ``timeout_s``. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        _LIVE.discard(self)
        return self.proc.wait()

    def records(self, run: int = -1) -> list[tuple[int, str]]:
        """``(partition, value)`` per record the program printed in start ``run``."""
        if not self.outputs:
            return []
        text = self.outputs[run].read_text(errors="replace")
        return [r for r in map(self.parse, text.splitlines()) if r is not None]

    def wait_for(
        self, what: str, check: Callable[[list[tuple[int, str]]], bool], timeout_s: float = 60
    ) -> list[tuple[int, str]]:
        """Wait until ``check(records of the current run)``; fails naming the log."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.records()
            if check(got):
                return got
            if self.proc is not None and self.proc.poll() is not None:
                raise self.failure(f"exited with {self.proc.returncode} before {what}")
            if time.monotonic() > deadline:
                raise self.failure(f"not {what} after {timeout_s}s ({len(got)} records)")
            time.sleep(0.3)

    def wait_quiet(self, quiet_s: float = 3.0, timeout_s: float = 60.0) -> None:
        """Wait until the output has not grown for ``quiet_s``."""
        last, since = -1, time.monotonic()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            size = self.outputs[-1].stat().st_size
            if size != last:
                last, since = size, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.3)
        raise self.failure(f"output still growing after {timeout_s}s")

    def failure(self, message: str) -> AssertionError:
        """The error to raise; the app is killed first (a failed test must not leave it
        running against the next test's clusters)."""
        self.kill()
        log = self.outputs[-1].with_suffix(".log") if self.outputs else None
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log else ""
        return AssertionError(f"{self.name}: {message}\n--- {log} ---\n{tail}")


# faust draws a start-up spinner on the same standard output (cursor hide/show escapes,
# backspaces), so the first record's line can begin with them: "\x1b[?25l3 1502 ...".
_TERMINAL_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08]")


def faust_fields(line: str) -> list[str]:
    """The fields of one line of the faust example's output, terminal controls removed."""
    return _TERMINAL_CONTROL.sub("", line).split()


def faust_app(workdir: Path, app_id: str, topic: str, partitions: int) -> AppProcess:
    """The faust example worker; its lines are ``<partition> <offset> <key> <value> <count>``."""

    def parse(line: str) -> tuple[int, str] | None:
        parts = faust_fields(line)
        if len(parts) != 5 or not parts[0].isdigit():
            return None
        return int(parts[0]), parts[3]

    return AppProcess(
        "faust",
        workdir,
        lambda _b: [sys.executable, str(FAUST_APP), "worker", "-l", "warn"],
        parse,
        env=lambda bootstrap: {
            "ORDERS_BROKER": f"kafka://{bootstrap}",
            "ORDERS_TOPIC": topic,
            "ORDERS_APP": app_id,
            "ORDERS_PARTITIONS": str(partitions),
        },
    )


def faust_counts(app: AppProcess, run: int = -1) -> list[tuple[str, int]]:
    """``(key, count)`` per line of the faust app's run ``run``, in order."""
    out = []
    for line in app.outputs[run].read_text(errors="replace").splitlines():
        parts = faust_fields(line)
        if len(parts) == 5 and parts[0].isdigit():
            out.append((parts[2], int(parts[4])))
    return out


def console_consumer(workdir: Path, group: str, topic: str) -> AppProcess:
    """``kafka-console-consumer --group`` printing ``Partition:<p>\\t<key>\\t<value>``;
    read_committed (see docs/failover.md: copies a puller had not committed are not records)."""

    def parse(line: str) -> tuple[int, str] | None:
        parts = line.split("\t")
        if len(parts) != 3 or not parts[0].startswith("Partition:"):
            return None
        return int(parts[0].removeprefix("Partition:")), parts[2]

    def command(bootstrap: str) -> list[str]:
        args = [
            *("--bootstrap-server", bootstrap, "--topic", topic, "--group", group),
            "--from-beginning",
            *("--isolation-level", "read_committed"),
            *("--formatter-property", "print.partition=true"),
            *("--formatter-property", "print.key=true"),
            # As plain_app: a shorter session, so failback waits less for the member
            # that died with dc-a (the default is 45 s).
            *("--consumer-property", "session.timeout.ms=10000"),
        ]
        return java(CONSOLE_CONSUMER, args, workdir=workdir, heap="-Xmx256m", log_level="WARN")

    return AppProcess("console", workdir, command, parse)


def plain_app(workdir: Path, group: str, topic: str) -> AppProcess:
    """``tests/support/plain_app.py``: a confluent-kafka consumer committing after every
    batch; its lines are ``<partition> <value>``."""

    def parse(line: str) -> tuple[int, str] | None:
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit():
            return None
        return int(parts[0]), parts[1]

    def command(bootstrap: str) -> list[str]:
        return [sys.executable, "-m", "tests.support.plain_app", bootstrap, group, topic]

    return AppProcess(
        "plain", workdir, command, parse, env=lambda _b: {"PYTHONPATH": str(REPO_ROOT)}
    )


class Produce(threading.Thread):
    """``rate`` records a second over ``partitions`` partitions until stopped; record n
    of partition p has key ``k<p>`` and value ``<p>:<n>`` (``prefix`` before it)."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, rate: int, prefix: str = ""
    ) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "message.timeout.ms": 3000,
                "log_level": 2,  # not a line per reconnection once its cluster is killed
            }
        )
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.prefix = prefix
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        began = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while self.sent < due:
                p = self.sent % self.partitions
                value = f"{self.prefix}{p}:{self.sent // self.partitions}".encode()
                try:
                    self.producer.produce(
                        self.topic, key=f"k{p}".encode(), value=value, partition=p
                    )
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(3)


def produce_batch(bootstrap: str, topic: str, partitions: int, count: int, prefix: str) -> set[str]:
    """``count`` records at once (keys and values as :class:`Produce`); their values."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = set()
    for n in range(count):
        p = n % partitions
        value = f"{prefix}{p}:{n // partitions}"
        producer.produce(topic, key=f"k{p}".encode(), value=value.encode(), partition=p)
        values.add(value)
    assert producer.flush(10) == 0, "not delivered"
    return values
