"""The replicators under test, behind one small interface: start on some topics, list
the processes that do the work, stop, and remove what they left on the clusters."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import yaml
from confluent_kafka import ConsumerGroupState

from crossfeed.bench import jvm, mm2
from crossfeed.bench.cleanup import Janitor, delete_groups
from crossfeed.kafka import clients
from crossfeed.wire import ids
from crossfeed.wire import topics as wire_topics


class Replicator(Protocol):
    name: str

    def start(self, topics: list[str], groups: list[str] | None = None) -> dict[str, int]:
        """Start replicating ``topics`` dc-a -> dc-b; returns process label -> pid."""
        ...

    def stop(self) -> None:
        """Stop the processes and delete the replicator's own topics."""
        ...

    def log_tail(self) -> str: ...


def bench_config(workdir: Path, clusters: dict[str, dict[str, Any]]) -> Path:
    """A crossfeed configuration file for the benchmark's clusters (``--config``)."""
    path = workdir / "crossfeed.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": {alias: dict(conf) for alias, conf in clusters.items()},
                "control_cluster": "dc-b",
                "log_level": "WARNING",
            }
        )
    )
    return path


def service_command(config: Path, role: str, feed: str, feed_file: Path, *extra: str) -> list[str]:
    """``crossfeed <role> run`` for one feed, as an operator starts it."""
    return [
        sys.executable,
        "-m",
        "crossfeed.cli.main",
        "--config",
        str(config),
        role,
        "run",
        "--feed",
        feed,
        "--feed-file",
        str(feed_file),
        *extra,
    ]


def settle_group(conf: dict[str, Any], group: str, members: int, timeout_s: float = 60) -> None:
    """Until ``group`` is stable with ``members`` members, then a second for the tasks it
    handed out to start (at most ``timeout_s``; a group that never settles is measured
    as it is)."""
    admin = clients.admin(conf, logger=clients.QUIET)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # not there yet, or the cluster is slow
            described = admin.describe_consumer_groups([group], request_timeout=5)[group]
            state = described.result(timeout=10)
            if state.state == ConsumerGroupState.STABLE and len(state.members) == members:
                time.sleep(1.0)
                return
        time.sleep(0.5)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return f"--- {path} ---\n" + "\n".join(text[-lines:])


class Crossfeed:
    """Puller processes on a feed file, as an operator runs them (a mirror feed's pullers
    write the target topics): one by default; with ``pullers`` > 1 the feed's tasks spread
    over them (their group)."""

    def __init__(
        self,
        janitor: Janitor,
        run_id: str,
        source: dict[str, Any],
        target: dict[str, Any],
        pullers: int = 1,
    ) -> None:
        self.pullers = pullers
        self.name = "crossfeed" if pullers == 1 else f"crossfeed-{pullers}p"
        self.janitor = janitor
        self.run_id = run_id
        self.source, self.target = source, target
        self.workdir = janitor.tempdir(f"crossfeed-{run_id}")
        self.config = bench_config(self.workdir, {"dc-a": source, "dc-b": target})
        self.feed = f"bench-{run_id}"
        self.feed_file = self.workdir / "feed.yaml"
        self.procs: dict[str, Any] = {}
        self.settled_at: float | None = None
        """With more than one puller: when their group had settled (monotonic)."""

    def feed_spec(self, topics: list[str]) -> dict[str, Any]:
        return {
            "name": self.feed,
            "source": "dc-a",
            "sink-uri": "kafka://dc-b",
            "topics": topics,
            "start": "earliest",
        }

    def start(self, topics: list[str], groups: list[str] | None = None) -> dict[str, int]:
        self.feed_file.write_text(yaml.safe_dump(self.feed_spec(topics)))
        self.janitor.topics(self.target, [wire_topics.changes(self.feed)])
        labels = ["puller"] if self.pullers == 1 else [f"puller-{i}" for i in range(self.pullers)]
        for label in labels:  # a mirror feed's pullers write the target topics: no sink
            role = label.split("-")[0]
            extra = ("--instance", f"{self.feed}-{label}") if label != role else ()
            cmd = service_command(self.config, role, self.feed, self.feed_file, *extra)
            log = self.workdir / f"{label}.log"
            self.procs[label] = self.janitor.process(jvm.spawn(cmd, log))
        if self.pullers > 1:
            # The first puller up takes every task, the others' arrival moves some: wait
            # for that handoff here, or a lag phase would measure it.
            settle_group(self.target, ids.puller_group(self.feed), self.pullers)
            self.settled_at = time.monotonic()
        return {label: p.pid for label, p in self.procs.items()}

    def stop(self) -> None:
        for proc in self.procs.values():
            self.janitor.stop(proc)
        self.procs.clear()
        self.janitor.drop_topics(self.target, [wire_topics.changes(self.feed)])
        groups = [ids.puller_group(self.feed)]
        for conf in (self.source, self.target):
            delete_groups(conf, groups)

    def log_tail(self) -> str:
        return "\n".join(_tail(self.workdir / f"{label}.log") for label in self.procs)


class MirrorMaker2:
    """MirrorMaker 2, dedicated mode, one JVM (see :mod:`crossfeed.bench.mm2`)."""

    name = "mm2"

    def __init__(
        self,
        janitor: Janitor,
        run_id: str,
        source: dict[str, Any],
        target: dict[str, Any],
        refresh_topics_s: int | None = 5,
    ) -> None:
        self.janitor = janitor
        self.run_id = run_id
        self.source, self.target = source, target
        self.refresh_topics_s = refresh_topics_s
        self.workdir = janitor.tempdir(f"mm2-{run_id}")
        self.cfg: mm2.Mm2Config | None = None
        self.proc: Any = None

    def start(self, topics: list[str], groups: list[str] | None = None) -> dict[str, int]:
        self.cfg = mm2.Mm2Config(
            run_id=self.run_id,
            source_bootstrap=str(self.source["bootstrap.servers"]),
            target_bootstrap=str(self.target["bootstrap.servers"]),
            topics=tuple(topics),
            groups=tuple(groups or ()),
            refresh_topics_s=self.refresh_topics_s,
        )
        self.janitor.topics(self.target, self.cfg.internal_topics_target)
        self.janitor.topics(self.source, self.cfg.internal_topics_source)
        props = mm2.write(self.cfg, self.workdir)
        cmd = mm2.command(props, self.workdir)
        self.proc = self.janitor.process(jvm.spawn(cmd, self.workdir / "mm2.log"))
        return {"mm2": self.proc.pid}

    def stop(self) -> None:
        if self.proc is not None:
            self.janitor.stop(self.proc, grace_s=20)
            self.proc = None
        if self.cfg is not None:
            self.janitor.drop_topics(self.target, self.cfg.internal_topics_target)
            self.janitor.drop_topics(self.source, self.cfg.internal_topics_source)

    def log_tail(self) -> str:
        return _tail(self.workdir / "mm2.log")
