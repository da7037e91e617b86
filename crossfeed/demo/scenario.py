"""``crossfeed demo``: the main job end to end on the local stack.

A coordinator and two pullers replicate an orders topic from dc-a to dc-b (the pullers
write the target topic directly) while a producer writes to dc-a and a consumer group
(the client library's TimestampedConsumer) reads and commits there. Then dc-a is lost
(its broker is killed), the feed is failed over, and the same group goes on reading on
dc-b from its translated offsets. The summary counts what was produced, replicated,
consumed before and after, re-read, skipped, lost.

Every process is stopped and dc-a restarted at the end, Ctrl-C included, so the demo
can run again at once; each run uses its own topic, feed and group names.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from crossfeed.client.consumer import TimestampedConsumer
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.local import processes, stack

PARTITIONS = 4


@dataclass
class Summary:
    produced: int = 0  # acknowledged by dc-a
    replicated: int = 0  # of those, on dc-b when dc-a was lost
    consumed_before: int = 0  # by the group on dc-a
    consumed_after: int = 0  # by the same group on dc-b after failover
    re_read: int = 0  # consumed on dc-b although already consumed on dc-a
    skipped: int = 0  # replicated but consumed by neither
    lost: int = 0  # produced on dc-a, never replicated (the RPO)
    failover_s: float = 0.0  # dc-a lost -> the group reading on dc-b

    def lines(self) -> list[str]:
        return [
            f"records produced on dc-a        {self.produced:>8,}",
            f"replicated to dc-b              {self.replicated:>8,}",
            f"consumed on dc-a before loss    {self.consumed_before:>8,}",
            f"consumed on dc-b after failover {self.consumed_after:>8,}",
            f"re-read                         {self.re_read:>8,}",
            f"skipped                         {self.skipped:>8,}",
            f"lost (never replicated)         {self.lost:>8,}",
            f"failover took                   {self.failover_s:>8.1f} s",
        ]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Names:
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def topic(self) -> str:
        return f"demo-orders-{self.run}"

    @property
    def feed(self) -> str:
        return f"demo-{self.run}"

    @property
    def group(self) -> str:
        return f"demo-billing-{self.run}"


class Processes:
    """The services of the demo, as real processes; all stopped by :meth:`stop_all`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.feeds: list[tuple[CoordinatorClient, str]] = []  # removed on the way out

    def created(self, api: CoordinatorClient, feed: str) -> None:
        """``feed`` was created through ``api``: :meth:`remove_feeds` removes it."""
        self.feeds.append((api, feed))

    def remove_feeds(self, say: Callable[[str], None], timeout_s: float = 60.0) -> None:
        """Remove the feeds the demo created (while its coordinator runs), so that
        ``crossfeed status`` shows none of them afterwards; the data they wrote stays."""
        for api, feed in self.feeds:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    api.remove_feed(feed)
                    say(f"removed feed {feed} (the data it wrote stays)")
                    break
                except Exception as err:  # a coordinator still electing itself: retry
                    if isinstance(err, ApiError) and err.error_code == "feed_not_found":
                        break  # removed already (a switchover retires the old direction)
                    if time.monotonic() > deadline:
                        say(
                            f"could not remove feed {feed} ({err}): crossfeed changefeed "
                            f"remove {feed}"
                        )
                        break
                    time.sleep(1)
        self.feeds.clear()

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "crossfeed.cli.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the demo only; it stops them in order
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


class Producer(threading.Thread):
    """Writes numbered orders to dc-a at a steady rate; remembers what was acknowledged."""

    def __init__(self, conf: dict[str, Any], topic: str, records: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.producer = clients.producer(conf)
        self.topic, self.records, self.rate = topic, records, rate
        self.acked: set[bytes] = set()
        self.lock = threading.Lock()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            with self.lock:
                self.acked.add(msg.value())

    def run(self) -> None:
        started = time.monotonic()
        for n in range(self.records):
            while n > (time.monotonic() - started) * self.rate:
                self.producer.poll(0.005)
            self.producer.produce(
                self.topic,
                key=f"customer-{n % 97}".encode(),
                value=f"order-{n}".encode(),
                on_delivery=self._on_delivery,
            )
        self.producer.flush(30)


def _consume(consumer: Any, seen: list[bytes], until: Callable[[], bool], idle_s: float) -> None:
    """Read and commit (every batch) until ``until()`` or nothing came for ``idle_s``."""
    last = time.monotonic()
    while not until():
        batch = consumer.consume(200, timeout=0.2)
        records = [m for m in batch if not m.error()]
        if records:
            seen.extend(m.value() for m in records)
            consumer.commit(asynchronous=False)
            last = time.monotonic()
        elif time.monotonic() - last > idle_s:
            return


def _count_on(conf: dict[str, Any], topic: str) -> set[bytes]:
    """Every value on ``topic`` (read_committed), read to its end."""
    consumer = clients.consumer(
        conf, **{"group.id": f"demo-counter-{uuid.uuid4().hex[:6]}", "enable.partition.eof": True}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: set[bytes] = set()
        ended: set[int] = set()
        deadline = time.monotonic() + 60
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            msg: Any
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        ended.add(msg.partition())
                    continue
                values.add(msg.value())
        return values
    finally:
        consumer.close()


@dataclass
class Demo:
    records: int = 6000
    rate: float = 1000.0
    say: Callable[[str], None] = print
    progress: Callable[[dict[str, Any]], None] = lambda _status: None
    names: Names = field(default_factory=Names)

    def run(self) -> Summary:
        self.say("starting the local stack (dc-a, dc-b) ...")
        ids = stack.up(postgres=False)
        a = {"bootstrap.servers": stack.node("dc-a").bootstrap}
        b = {"bootstrap.servers": stack.node("dc-b").bootstrap}
        self.say(f"dc-a {ids['dc-a']}, dc-b {ids['dc-b']}")
        kafka_topics.ensure_topic(clients.admin(a), self.names.topic, PARTITIONS)
        workdir = Path(tempfile.mkdtemp(prefix="crossfeed-demo-"))
        procs = Processes(workdir)
        try:
            return self._run(a, b, procs)
        except KeyboardInterrupt:
            self.say("interrupted: stopping everything")
            raise
        finally:
            try:  # the feed's state lives on the control cluster, dc-b: dc-a may be down
                procs.remove_feeds(self.say)
            finally:
                procs.stop_all()
            if stack.node("dc-a").pid() is None:
                self.say("bringing dc-a back (same cluster id, data kept) ...")
                stack.start("dc-a")
            self.say(f"logs of the demo's services: {workdir}")

    def _run(self, a: dict[str, Any], b: dict[str, Any], procs: Processes) -> Summary:
        port = processes.free_port()
        server = f"http://127.0.0.1:{port}"
        procs.start("coordinator", "coordinator", "run", "--port", str(port))
        api = CoordinatorClient(server)
        self._wait(lambda: _answers(api), 60, "the coordinator to answer")
        api.create_feed(
            {
                "name": self.names.feed,
                "source": "dc-a",
                "sink-uri": "kafka://dc-b",
                "topics": [self.names.topic],
                "mode": "mirror",
            }
        )
        procs.created(api, self.names.feed)
        self.say(f"created mirror feed {self.names.feed}: dc-a/{self.names.topic} -> dc-b")
        for n in (1, 2):
            procs.start(f"puller-{n}", "puller", "run", "--feed", self.names.feed)

        producer = Producer(a, self.names.topic, self.records, self.rate)
        producer.start()
        consumer = TimestampedConsumer(
            {
                **a,
                "group.id": self.names.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe([self.names.topic])
        before: list[bytes] = []
        stop_at = int(self.records * 0.6)
        reader = threading.Thread(
            target=_consume,
            args=(consumer, before, lambda: len(before) >= stop_at, 60),
            daemon=True,
        )
        reader.start()
        while producer.is_alive() or reader.is_alive():
            self._show(api, produced=len(producer.acked), consumed=len(before))
            time.sleep(1)
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.committed(consumer.assignment(), timeout=10)
        }
        consumer.close()
        del consumer  # its timestamps producer would keep calling the dead dc-a
        self.say(f"group {self.names.group} consumed {len(before):,} records on dc-a and stopped")

        def caught_up() -> bool:
            # The live view goes on meanwhile, until the coordinator knows consistency_ts:
            # the pullers of a first run start a few seconds after the producer, and the
            # view would end before the feed's lag is known.
            status = self._show(api, produced=len(producer.acked), consumed=len(before))
            known = bool(status.get("consistency_ts_us"))
            return known and self._caught_up(api, b, producer.acked, committed)

        self._wait(
            caught_up, 120, "dc-b to hold every record and the group's offsets to be translated"
        )

        self.say("losing dc-a: killing its broker")
        lost_at = time.monotonic()
        replicated = _count_on(b, self.names.topic)
        stack.stop("dc-a", hard=True)
        report = api.request("POST", "/v1/failover", {"feed": self.names.feed})
        self.say(f"failed over feed {self.names.feed}: {_rpo_line(report)}")

        after: list[bytes] = []
        moved = clients.consumer(
            b, **{"group.id": self.names.group, "auto.offset.reset": "earliest"}
        )
        moved.subscribe([self.names.topic])
        resumed: list[float] = []

        def until() -> bool:  # read until idle; note when the first record arrived
            if after and not resumed:
                resumed.append(time.monotonic())
            return False

        _consume(moved, after, until, idle_s=8)
        failover_s = (resumed[0] - lost_at) if resumed else 0.0
        moved.close()
        acked = set(producer.acked)
        before_set, after_list = set(before), after
        return Summary(
            produced=len(acked),
            replicated=len(acked & replicated),
            consumed_before=len(before),
            consumed_after=len(after_list),
            re_read=sum(1 for v in after_list if v in before_set),
            skipped=len((acked & replicated) - before_set - set(after_list)),
            lost=len(acked - replicated),
            failover_s=failover_s,
        )

    def _caught_up(
        self,
        api: CoordinatorClient,
        b: dict[str, Any],
        acked: set[bytes],
        committed: dict[tuple[str, int], int],
    ) -> bool:
        """dc-b holds every record, and the group's last commits are translated exactly."""
        if not acked <= _count_on(b, self.names.topic):
            return False
        translated = api.request(
            "GET", f"/v1/groups/{self.names.group}/translate?feed={self.names.feed}"
        )
        partitions = translated.get("partitions", []) if isinstance(translated, dict) else []
        known = {(p["topic"], p["partition"]): p for p in partitions}
        return all(
            (where in known and known[where]["exact"] and known[where]["source_offset"] == offset)
            for where, offset in committed.items()
            if offset >= 0
        )

    def _show(self, api: CoordinatorClient, **counts: int) -> dict[str, Any]:
        """One update of the live view; returns the feed's status as shown."""
        try:
            feeds = api.status()
        except Exception:  # the coordinator is busy starting; try again next second
            feeds = []
        status: dict[str, Any] = next((f for f in feeds if f.get("name") == self.names.feed), {})
        self.progress({**counts, "status": status})
        return status

    def _wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        wait_until(check, timeout_s, what)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Until ``check()`` is true (an exception counts as not yet), else TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.5)
    raise TimeoutError(f"gave up waiting {timeout_s:.0f}s for {what}")


def _answers(api: CoordinatorClient) -> bool:
    api.ha_status()
    return True


def _rpo_line(report: Any) -> str:
    if not isinstance(report, dict):
        return "done"
    seconds = report.get("rpo_seconds")
    return (
        f"{report.get('unreplicated_records', '?')} records never reached dc-b"
        + (f" (RPO {seconds:.1f} s)" if isinstance(seconds, (int, float)) else "")
        + f"; {_groups_line(report)}"
    )


def _groups_line(report: dict[str, Any]) -> str:
    """What the failover did to each consumer group of the feed. The report's ``moved``
    lists only the groups its final round committed on the target; a group that the
    commit stream already kept at its translated offsets there, as it committed on the
    source, needs no move and is not in it."""
    target = report.get("target", "the target")
    moved: dict[str, int] = report.get("moved", {})
    active = set(report.get("active", []))
    said = []
    for group in report.get("groups", []):
        name, rows = group["group"], group.get("partitions", [])
        if name in moved:
            said.append(f"group {name} moved to {target} ({moved[name]} partition(s))")
        elif name in active:
            said.append(f"group {name} has live members on {target}: left alone")
        elif rows and all(row.get("exact") for row in rows):
            said.append(
                f"group {name} already at its translated offsets on {target} "
                "(kept there as it committed)"
            )
        else:
            inexact = sum(1 for row in rows if not row.get("exact"))
            said.append(f"group {name}: nothing exact to move on {inexact} partition(s)")
    listed = {group["group"] for group in report.get("groups", [])}
    said += [
        f"group {n} moved to {target} ({k} partition(s))"
        for n, k in moved.items()
        if n not in listed
    ]
    return "; ".join(said) or "no consumer group to move"
