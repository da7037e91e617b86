"""Apache Kafka MirrorMaker 2 in dedicated mode, configured as fairly as we know how.

* identity replication policy (topic names kept, as crossfeed keeps them);
* one flow dc-a->dc-b, ``--clusters dc-b`` (the node sits by its target), 2 tasks for a
  2-core machine (crossfeed runs one or two puller processes);
* the producer batches and compresses as crossfeed's puller does (batch.size 1 MiB,
  linger.ms 10, lz4, acks=all); the consumer reads read_committed, waits at most
  100 ms per fetch, fetches up to 8 MiB per partition (as crossfeed's puller does) and
  hands over up to 10,000 records per poll (crossfeed's batch);
* heartbeats off (no reverse herder writing to dc-a); checkpoints and group offset
  sync off for throughput runs, on every second for the failover runs;
* its Connect state topics are named per run, so no run inherits another's positions;
* at-least-once (MM2's default): exactly-once needs ``exactly.once.source.support``
  and internal REST, which users rarely turn on; crossfeed is exactly-once always.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from crossfeed.bench import jvm

MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
HEAP = "-Xms256m -Xmx1g"
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
SOURCE, TARGET = "dc-a", "dc-b"

PRODUCER: dict[str, str] = {
    "batch.size": str(1 << 20),
    "linger.ms": "10",
    "compression.type": "lz4",
    "acks": "all",
    "buffer.memory": str(64 << 20),
}
CONSUMER: dict[str, str] = {
    "isolation.level": "read_committed",
    "fetch.max.wait.ms": "100",
    "max.partition.fetch.bytes": str(8 << 20),
    "max.poll.records": "10000",
}


@dataclass(frozen=True)
class Mm2Config:
    run_id: str
    source_bootstrap: str
    target_bootstrap: str
    topics: tuple[str, ...]
    groups: tuple[str, ...] = ()
    """Groups whose offsets are checkpointed and synced (failover runs); none: off."""
    tasks: int = 2
    refresh_topics_s: int | None = 5
    """How often MM2 looks for new topics; None: its default (600 s)."""

    @property
    def internal_topics_target(self) -> list[str]:
        """Topics this run's MM2 creates on the target."""
        return [
            f"bench-{self.run_id}-mm2-offsets",
            f"bench-{self.run_id}-mm2-configs",
            f"bench-{self.run_id}-mm2-status",
            f"{SOURCE}.checkpoints.internal",
            "heartbeats",  # created on the target even with heartbeats off
        ]

    @property
    def internal_topics_source(self) -> list[str]:
        return [f"mm2-offset-syncs.{TARGET}.internal"]


def properties(cfg: Mm2Config) -> dict[str, str]:
    """The ``mm2.properties`` of one run."""
    flow = f"{SOURCE}->{TARGET}"
    translate = bool(cfg.groups)
    props = {
        "clusters": f"{SOURCE}, {TARGET}",
        f"{SOURCE}.bootstrap.servers": cfg.source_bootstrap,
        f"{TARGET}.bootstrap.servers": cfg.target_bootstrap,
        f"{flow}.enabled": "true",
        f"{TARGET}->{SOURCE}.enabled": "false",
        f"{flow}.topics": "|".join(cfg.topics),
        f"{flow}.groups": "|".join(cfg.groups) if translate else "^$",
        "replication.policy.class": IDENTITY,
        "tasks.max": str(cfg.tasks),
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": str(translate).lower(),
        "sync.group.offsets.enabled": str(translate).lower(),
        "sync.topic.acls.enabled": "false",
        # Skip the reflective scan of the classpath for plugins at start (Connect advises it).
        "plugin.discovery": "service_load",
        "refresh.groups.interval.seconds": "5",
        # Single-node clusters.
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        # This run's own Connect state.
        f"{TARGET}.group.id": f"bench-{cfg.run_id}-mm2",
        "offset.storage.topic": f"bench-{cfg.run_id}-mm2-offsets",
        "config.storage.topic": f"bench-{cfg.run_id}-mm2-configs",
        "status.storage.topic": f"bench-{cfg.run_id}-mm2-status",
    }
    if cfg.refresh_topics_s is not None:
        props["refresh.topics.interval.seconds"] = str(cfg.refresh_topics_s)
    if translate:
        props["emit.checkpoints.interval.seconds"] = "1"
        props["sync.group.offsets.interval.seconds"] = "1"
    props.update({f"{TARGET}.producer.{k}": v for k, v in PRODUCER.items()})
    props.update({f"{SOURCE}.consumer.{k}": v for k, v in CONSUMER.items()})
    return props


def render(props: Mapping[str, str]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in props.items())


def command(props_file: Path, workdir: Path) -> list[str]:
    return jvm.java(
        MAIN, [str(props_file), "--clusters", TARGET], workdir=workdir, heap=HEAP, log_level="WARN"
    )


def write(cfg: Mm2Config, workdir: Path) -> Path:
    path = workdir / f"mm2-{cfg.run_id}.properties"
    path.write_text(render(properties(cfg)))
    return path
