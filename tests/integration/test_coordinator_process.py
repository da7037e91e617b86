"""A coordinator as a real process, and the harness the other coordinator tests share.

Harness (imported by ``test_coordinator_api.py`` and ``test_coordinator_ha.py``):

* :class:`CoordinatorProcess` — ``crossfeed coordinator run`` as a subprocess (kill -9,
  SIGSTOP/SIGCONT, SIGTERM from ``tests.support.services.ServiceProcess``) plus its REST
  API;
* :class:`Coordinators` — a group started with one config file, that finds the leader;
* :class:`SimulatedPuller` — heartbeats like a puller (HeartbeatSender), can go silent,
  report checkpoints and errors, or leave;
* :class:`AssignmentReader` — reads puller assignments from ``_crossfeed.state`` the way
  a puller must: an assignment counts only if its epoch is at least the highest epoch
  seen (lease records included), so a deposed leader's late writes are ignored.

All coordinator tests share one control cluster and so one lease: a group is stopped
with SIGTERM (which releases the lease) before the next starts. The failover timeout is
:data:`FAILOVER_S` (the default of 10 s stays the default).
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.membership import HeartbeatContent, HeartbeatSender, TopicTail
from crossfeed.wire import codec, topics
from tests.support.clusters import Clusters
from tests.support.polling import wait_for
from tests.support.services import ServiceProcess, free_port

pytestmark = pytest.mark.integration

FAILOVER_S = 6.0
TOKEN = "test-token"
UNREACHABLE = "127.0.0.1:9"  # a configured cluster alias where nothing answers


def write_config(clusters: Clusters, path: Path, token: str | None = TOKEN) -> Path:
    data: dict[str, Any] = {
        "clusters": {
            "dc-a": clusters.a.config,
            "dc-b": clusters.b.config,
            "dc-gone": {"bootstrap.servers": UNREACHABLE},
        },
        "control_cluster": "dc-b",
    }
    if token:
        data["api_token"] = token
    path.write_text(yaml.safe_dump(data))
    return path


class CoordinatorProcess(ServiceProcess):
    """``crossfeed coordinator run`` with its REST API on a free port."""

    def __init__(self, instance: str, config_file: Path, workdir: Path) -> None:
        env = {"CROSSFEED_COORDINATOR__FAILOVER_TIMEOUT_S": str(FAILOVER_S)}
        super().__init__(
            "coordinator",
            feed="-",
            feed_file=Path("-"),
            config_file=config_file,
            workdir=workdir,
            instance=instance,
            env=env,
        )
        self.rest_port = free_port()

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "crossfeed.cli.main",
            "--config",
            str(self.config_file),
            "coordinator",
            "run",
            "--port",
            str(self.rest_port),
            "--metrics-port",
            str(self.port),
            "--instance",
            self.instance,
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def ha(self) -> dict[str, Any] | None:
        """GET /v1/ha/status, or None if the process does not answer."""
        if not self.alive or self.paused:
            return None
        try:
            result: dict[str, Any] = httpx.get(f"{self.url}/v1/ha/status", timeout=1).json()
            return result
        except (httpx.HTTPError, ValueError):
            return None

    def leads(self) -> bool:
        ha = self.ha()
        return ha is not None and ha["role"] == "leader"


class Coordinators:
    """A group of coordinator processes sharing one configuration file."""

    def __init__(self, clusters: Clusters, workdir: Path, token: str | None = TOKEN) -> None:
        self.workdir = workdir
        self.config_file = write_config(clusters, workdir / "crossfeed.yaml", token)
        self.procs: list[CoordinatorProcess] = []
        self.run = uuid.uuid4().hex[:4]

    def start(self, count: int) -> list[CoordinatorProcess]:
        new = [
            CoordinatorProcess(
                f"coord-{self.run}-{len(self.procs) + i}", self.config_file, self.workdir
            )
            for i in range(count)
        ]
        for proc in new:
            proc.start()
            self.procs.append(proc)
        return new

    def leader(
        self, timeout: float = 90.0, among: list[CoordinatorProcess] | None = None
    ) -> CoordinatorProcess:
        """The one process that reports itself leader (waits for an election)."""
        candidates = among or self.procs

        def find() -> CoordinatorProcess | None:
            leaders = [p for p in candidates if p.leads()]
            return leaders[0] if len(leaders) == 1 else None

        try:
            proc: CoordinatorProcess = wait_for(find, timeout, "one coordinator leading")
        except AssertionError:
            raise self.procs[0].failure("no leader elected", 60) from None
        return proc

    def settle(self, timeout: float = 30.0) -> CoordinatorProcess:
        """Wait until every running process names the same leader and knows its address."""
        leader = self.leader(timeout)

        def settled() -> bool:
            views = [p.ha() for p in self.procs if p.alive and not p.paused]
            return all(
                v is not None
                and v["leader"] == leader.instance
                and v["leader_address"] == f"127.0.0.1:{leader.rest_port}"
                for v in views
            )

        wait_for(settled, timeout, "every coordinator knowing the leader's address")
        return leader

    def standbys(self, leader: CoordinatorProcess) -> list[CoordinatorProcess]:
        return [p for p in self.procs if p is not leader and p.alive]

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate(15)


@pytest.fixture(scope="module")
def coordinator_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("coordinators")


def coordinator_group(
    clusters: Clusters, workdir: Path, count: int, token: str | None = TOKEN
) -> Iterator[Coordinators]:
    """Start ``count`` coordinators, wait for a leader; stop them all afterwards."""
    group = Coordinators(clusters, workdir, token)
    try:
        group.start(count)
        group.settle()
        yield group
    finally:
        group.stop()


class SimulatedPuller:
    """Heartbeats as puller ``instance_id`` of ``feed`` (no data is copied)."""

    def __init__(self, clusters: Clusters, instance_id: str, feed: str) -> None:
        self.instance_id = instance_id
        self.feed = feed
        self.silent = False
        self.resolved: dict[str, int] = {}  # resolved_ts per source partition
        # checkpoint_ts per source partition: a mirror feed's puller commits its copies
        # in the target, so what it committed is in the target.
        self.checkpoints: dict[str, int] = {}
        self.last_error = ""
        self.sender = HeartbeatSender(
            clusters.b.config, instance_id, "puller", self._content, interval_s=0.5
        )

    def _content(self) -> HeartbeatContent:
        if self.silent:
            raise RuntimeError("simulated silence")  # the sender skips this beat
        return HeartbeatContent(
            feeds=[self.feed],
            resolved=dict(self.resolved),
            checkpoints=dict(self.checkpoints),
            last_error=self.last_error,
        )

    def start(self) -> SimulatedPuller:
        self.sender.start()
        return self

    def go_silent(self) -> None:
        self.silent = True

    def leave(self) -> None:
        self.silent = False
        self.sender.leave()


class AssignmentReader:
    """Applies puller assignments like a puller must (epoch fencing), for every instance."""

    def __init__(self, clusters: Clusters, feed: str) -> None:
        self.feed = feed
        self.lock = threading.Lock()
        self.max_epoch = 0
        self.current: dict[str, dict[str, Any]] = {}  # instance -> applied Assignment record
        self.applied: list[dict[str, Any]] = []
        self.ignored: list[dict[str, Any]] = []
        self.tail = TopicTail(clusters.b.config, topics.STATE, self._on_record, name="reader")

    def __enter__(self) -> AssignmentReader:
        self.tail.start()
        assert self.tail.caught_up.wait(30)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.tail.stop()

    def _on_record(self, key: str, value: bytes | None) -> None:
        if value is None:
            return
        with self.lock:
            if key == "lease/coordinator":
                self.max_epoch = max(self.max_epoch, codec.decode("Lease", value)["epoch"])
            elif key.startswith(f"assignment/{self.feed}/puller/"):
                record = codec.decode("Assignment", value)
                if record["epoch"] < self.max_epoch:
                    self.ignored.append(record)
                    return
                self.max_epoch = record["epoch"]
                self.current[record["instance_id"]] = record
                self.applied.append(record)

    def tasks(self) -> dict[str, set[int]]:
        """Non-empty current task sets by instance."""
        with self.lock:
            out = {i: {p["partition"] for p in r["partitions"]} for i, r in self.current.items()}
        return {i: t for i, t in out.items() if t}

    def wait_tasks(
        self, check: Callable[[dict[str, set[int]]], bool], timeout: float, what: str
    ) -> dict[str, set[int]]:
        def done() -> list[dict[str, set[int]]]:
            tasks = self.tasks()
            return [tasks] if check(tasks) else []

        try:
            found: list[dict[str, set[int]]] = wait_for(done, timeout, what, every=0.05)
        except AssertionError:
            raise AssertionError(f"not {what} after {timeout}s; tasks now {self.tasks()}") from None
        return found[0]


def create_feed(url: str, name: str, tasks: int, names: list[str] | None = None) -> None:
    """Create a mirror feed ``name`` with ``tasks`` puller tasks through the REST API, of
    the topics ``names`` (default: those matching ``<name>-.*``)."""
    with CoordinatorClient(url, TOKEN) as api:
        api.create_feed(
            {
                "name": name,
                "source": "dc-a",
                "sink-uri": "kafka://dc-b",
                "topics": names or [f"{name}-.*"],
                "config": {"staging.partitions": str(tasks)},
            }
        )


def balanced(count: int, tasks: int, among: set[str]) -> Callable[[dict[str, set[int]]], bool]:
    """A check: ``tasks`` tasks spread evenly over exactly the pullers ``among``."""

    def check(current: dict[str, set[int]]) -> bool:
        sizes = sorted(len(t) for t in current.values())
        return (
            set(current) == among
            and set().union(*current.values()) == set(range(tasks))
            and sum(sizes) == tasks
            and sizes[-1] - sizes[0] <= 1
            and len(sizes) == count
        )

    return check


def remove_feed_quietly(group: Coordinators, name: str) -> None:
    """Leave the shared state tidy: remove a test's feed through any live coordinator."""
    for proc in group.procs:
        if proc.alive and not proc.paused:
            try:
                with CoordinatorClient(proc.url, TOKEN) as api:
                    api.remove_feed(name)
                return
            except ApiError:
                continue


def owners(tasks: dict[str, set[int]]) -> dict[int, str]:
    return {s: i for i, ts in tasks.items() for s in ts}


# -- tests of a single coordinator process -------------------------------------------------


@pytest.fixture(scope="module")
def single(clusters: Clusters, coordinator_workdir: Path) -> Iterator[Coordinators]:
    yield from coordinator_group(clusters, coordinator_workdir, 1)


def test_a_lone_coordinator_leads_and_serves_its_api(single: Coordinators) -> None:
    proc = single.leader()
    ha = wait_for(
        lambda: (h := proc.ha()) and h["leader_address"] and h,
        10,
        "the leader's address known from its heartbeat",
    )
    assert ha["leader"] == proc.instance and ha["epoch"] >= 1
    assert ha["leader_address"] == f"127.0.0.1:{proc.rest_port}"
    docs = httpx.get(f"{proc.url}/openapi.json", timeout=5).json()
    assert "/v1/changefeeds/{name}/pause" in docs["paths"]
    assert httpx.get(f"{proc.url}/healthz", timeout=5).text == "ok\n"
    metrics = httpx.get(f"{proc.url}/metrics", timeout=5).text
    assert "crossfeed_coordinator_role 1.0" in metrics
    assert proc.metric("crossfeed_coordinator_role") == 1.0  # the service /metrics port too
    captures = httpx.get(f"{proc.url}/v1/captures", timeout=5).json()
    assert proc.instance in {c["instance_id"] for c in captures}


def test_a_port_in_use_is_a_clear_error(single: Coordinators, coordinator_workdir: Path) -> None:
    busy = single.leader()
    other = CoordinatorProcess("coord-port-clash", single.config_file, coordinator_workdir)
    other.rest_port = busy.rest_port
    other.start()
    assert other.wait_exit(30) == 1
    assert f"cannot serve the REST API on 127.0.0.1:{busy.rest_port}" in other.log_text()
