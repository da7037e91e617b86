"""Every setting declared once: name, type, default and doc (pydantic-settings).

Precedence, highest first: explicit arguments (CLI flags), environment variables
``CROSSFEED_*`` (nested sections with ``__``: ``CROSSFEED_PULLER__MAX_BATCH_RECORDS``),
the configuration file (see :mod:`crossfeed.config.loader`), the defaults below.

Kafka client properties pass through per cluster alias, MirrorMaker 2 style: in the
file either nested (``clusters: {dc-a: {bootstrap.servers: ...}}``) or flat
(``dc-a.bootstrap.servers: ...``).
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from crossfeed.core import secrets, topic_configs
from crossfeed.kafka import client_overrides

ALIAS_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
HOST_PORT_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
SECURITY_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}


class ClusterConfig(BaseModel):
    """One Kafka cluster: librdkafka properties passed through untouched."""

    model_config = ConfigDict(frozen=True)

    properties: dict[str, str]

    @field_validator("properties")
    @classmethod
    def _check(cls, props: dict[str, str]) -> dict[str, str]:
        servers = props.get("bootstrap.servers", "")
        if not servers:
            raise ValueError("bootstrap.servers is missing; set it to host:port[,host:port...]")
        for server in servers.split(","):
            if not HOST_PORT_RE.match(server.strip()):
                raise ValueError(
                    f"bootstrap.servers entry {server!r} is not host:port; "
                    "write e.g. 127.0.0.1:19092"
                )
        client_overrides.check(props)
        props = {key: _resolved(key, value) for key, value in props.items()}
        protocol = props.get("security.protocol")
        if protocol is not None and protocol.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security.protocol {protocol!r} is not one of {sorted(SECURITY_PROTOCOLS)}"
            )
        return props

    @property
    def bootstrap_servers(self) -> str:
        return self.properties["bootstrap.servers"]

    def client_config(self, **overrides: object) -> dict[str, object]:
        """librdkafka configuration for this cluster, with per-client overrides."""
        return {**self.properties, **overrides}


def resolve_references(value: str, where: str) -> str:
    """``value`` with its ``${env:NAME}``/``${file:PATH}`` references read now, from this
    process's environment and files (crossfeed/core/secrets.py): passwords stay out of
    configuration files and stored feeds. SecretError (a ValueError) names what is
    missing."""
    return secrets.resolve(value, os.environ, lambda path: Path(path).read_text(), where=where)


def _resolved(key: str, value: str) -> str:
    try:
        return resolve_references(value, key)
    except secrets.SecretError as err:
        raise ValueError(str(err)) from None


def _flat_properties(props: dict[Any, Any]) -> dict[str, str]:
    """Cluster properties as librdkafka strings; a nested ``consumer:``/``producer:``/
    ``admin:`` mapping becomes ``consumer.<key>`` (the flat form means the same)."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if str(key) in client_overrides.CLIENT_KINDS and isinstance(value, dict):
            out.update({f"{key}.{k}": str(v) for k, v in value.items()})
        else:
            out[str(key)] = str(value)
    return out


FILE_DATA: ContextVar[dict[str, Any] | None] = ContextVar("crossfeed_file_data", default=None)
"""Parsed configuration file for the Settings being built (set by the loader)."""


class _FileSource(PydanticBaseSettingsSource):
    """The configuration file, below the environment in precedence."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns everything at once

    def __call__(self) -> dict[str, Any]:
        return FILE_DATA.get() or {}


Seconds = Annotated[float, Field(gt=0)]


class _Section(BaseModel):
    """A section of the configuration: a key it does not know is an error, like an unknown
    section (a misspelt setting must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid")


class PullerSettings(_Section):
    """Puller: copies source records into the target topics (mirror feeds) or
    ``_crossfeed.<feed>.changes`` (ordered feeds)."""

    max_batch_records: int = Field(10_000, ge=1, description="records per transaction, at most")
    max_batch_bytes: int = Field(8 << 20, ge=1024, description="bytes per transaction, at most")
    pack_bytes: int = Field(
        512 << 10,
        ge=1024,
        description="bytes of records buffered per source partition before they are sent "
        "(into the open transaction)",
    )
    staging_compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = Field(
        "none",
        description="compression of staging records: the puller usually runs beside the "
        "target cluster, where bytes are cheaper than the CPU to squeeze them",
    )
    copy_compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = Field(
        "none",
        description="compression of a mirror feed's copies as the puller sends them: with "
        "none the target topic's compression.type (taken from the source topic) decides, "
        "as on the source; a codec saves bytes between data centers, but every consumer "
        "of the target must be able to read it (aiokafka, so faust, needs the lz4 package)",
    )
    commit_interval_ms: int = Field(
        50,
        ge=1,
        description="longest a transaction stays open while keeping up (50 against 100: lag "
        "p50 ~35 ms lower, dc-b's broker ~12% more CPU from the extra commits)",
    )
    backlog_commit_interval_ms: int = Field(
        1000,
        ge=1,
        description="longest a transaction stays open while catching up a backlog (a quarter "
        "of the newest record's age, at most this)",
    )
    resolved_interval_ms: int = Field(
        1000,
        ge=10,
        description="how often a task with nothing to copy still commits resolved marks (while "
        "records flow, every transaction carries them); an idle partition's resolved_ts, which "
        "holds an ordered feed back, advances this often",
    )
    topic_refresh_s: Seconds = Field(
        5.0,
        description="how often new matching topics, and partitions added to source topics, "
        "are looked for (ordered feeds: at least every 0.5 s, as no resolved_ts passes the "
        "last look)",
    )
    config_sync_interval_s: float = Field(
        60.0,
        ge=0,
        description="mirror feeds: how often target topics take their source topics' "
        "configs (topic-level overrides, except config_sync_exclude); 0: never, configs are "
        "copied once, when the target topic is created",
    )
    config_sync_exclude: str = Field(
        ",".join(topic_configs.DEFAULT_EXCLUDE),
        description="mirror feeds: topic configs a target topic never takes from its source, "
        "comma-separated names or regexes (full match); default: MirrorMaker 2's exclude "
        "list plus message.timestamp.before/after.max.ms",
    )

    acl_sync: bool = Field(
        True,
        description="mirror feeds, clusters with an authorizer: copy the READ and DESCRIBE "
        "ACLs of the source topics to their target topics (never WRITE; never removed), "
        "every config_sync_interval_s, so consumers that fail over keep their rights",
    )

    @field_validator("config_sync_exclude")
    @classmethod
    def _exclude_compiles(cls, value: str) -> str:
        topic_configs.Excluded.parse(value)
        return value


class SinkSettings(_Section):
    """Sink: writes staged records into target topics or a database."""

    max_batch_records: int = Field(50_000, ge=1, description="records per transaction, at most")
    commit_interval_ms: int = Field(100, ge=1, description="longest a transaction stays open")
    backlog_commit_interval_ms: int = Field(
        1000,
        ge=1,
        description="longest a transaction stays open while catching up a backlog (a quarter "
        "of the newest record's age, at most this)",
    )


class SorterSettings(_Section):
    """Sorter: a Spark Structured Streaming job putting ordered feeds into commit order."""

    spark_master: str | None = Field(
        None,
        description="Spark master URL: local[*], spark://host:7077, k8s://..., yarn; default: "
        "spark.master of $SPARK_CONF_DIR/spark-defaults.conf, else local[*]; ignored under "
        "spark-submit, which sets it",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="extra Spark properties (spark.executor.memory, spark.executor.instances, "
        "...); they override crossfeed's defaults",
    )
    kafka_options: dict[str, str] = Field(
        default_factory=dict,
        description="extra Java Kafka client properties for Spark's Kafka source and writer "
        "(e.g. ssl.truststore.location); they override those derived from the cluster's",
    )
    checkpoint_dir: str | None = Field(
        None,
        description="where the sorter keeps its checkpoints and pending events (one "
        "subdirectory per feed; shared storage on a real cluster); default "
        "$CROSSFEED_HOME/sorter",
    )
    driver_memory: str = Field(
        "1g", description="spark.driver.memory (local mode: also the executors' memory)"
    )
    trigger_interval_ms: int = Field(
        100,
        ge=0,
        description="micro-batch trigger interval; 0: the next batch at once (an idle feed "
        "then asks Kafka for new offsets every 10 ms)",
    )
    quiet_pause_ms: int = Field(
        5000,
        ge=0,
        description="after a micro-batch that read no change and left none pending, the "
        "longest wait before the next (the first change ends it at once): a quiet feed's "
        "marks then cost one batch per pause, not one per puller commit; at most half of "
        "laggard_after_s. 0: no pause",
    )
    max_offsets_per_trigger: int = Field(
        50_000,
        ge=1,
        description="changes read per micro-batch, at most (maxOffsetsPerTrigger); at most "
        "driver_release_rows keeps a backlog on the driver path",
    )
    max_records_per_read_task: int = Field(
        25_000,
        ge=0,
        description="changes one Spark task reads, at most (maxRecordsPerPartition): a "
        "staging partition with more in a micro-batch (a Debezium feed's one, catching up) is "
        "read in pieces side by side, while a small batch stays one task per partition "
        "(each task costs every batch); 0: no limit",
    )
    min_partitions: int = Field(
        0,
        ge=0,
        description="Spark tasks that read each micro-batch, at least (minPartitions), however "
        "small the batch: on a cluster, the executor cores; 0: no minimum (the staging "
        "partitions, split by max_records_per_read_task)",
    )
    shuffle_partitions: int = Field(
        2, ge=1, description="spark.sql.shuffle.partitions (the release itself is one partition)"
    )
    driver_release_rows: int = Field(
        100_000,
        ge=0,
        description="the most changes the driver holds to release them (a bigger release "
        "window goes out in parts, cut between commit_ts); a single transaction bigger than "
        "this is sorted by a Spark job (spills to disk). 0: every batch through Spark's "
        "jobs",
    )
    max_segments: int = Field(
        64,
        ge=2,
        description="pending segments (one per micro-batch) kept before they are compacted "
        "into one, while a partition holds the feed back",
    )
    partitions_refresh_s: Seconds = Field(
        30.0, description="how often the feed's source partitions are read from the source"
    )
    laggard_after_s: Seconds = Field(
        10.0,
        description="a partition holding the feed back whose resolved_ts has not advanced "
        "for this long is reported as a laggard (/status, metric, heartbeat)",
    )


class CoordinatorSettings(_Section):
    """Coordinator: feeds, assignment, leadership, offset translation, REST API."""

    host: str = Field("127.0.0.1", description="REST API listen address")
    port: int = Field(8300, ge=1, le=65535, description="REST API port (TiCDC's)")
    tls_cert_file: str | None = Field(
        None, description="PEM certificate (chain) of the REST API: set with tls_key_file for https"
    )
    tls_key_file: str | None = Field(None, description="PEM private key of tls_cert_file")
    failover_timeout_s: Seconds = Field(
        10.0, description="an instance silent this long loses its tasks; a leader its lease"
    )
    translate_interval_s: Seconds = Field(1.0, description="how often group offsets are translated")
    error_stuck_s: Seconds = Field(
        1800.0, description="a feed in the error state this long becomes failed (tasks stop)"
    )


class Settings(BaseSettings):
    """Everything a crossfeed process reads at start."""

    model_config = SettingsConfigDict(
        env_prefix="CROSSFEED_", env_nested_delimiter="__", extra="forbid"
    )

    clusters: dict[str, ClusterConfig] = Field(
        default_factory=dict, description="Kafka clusters by alias (dc-a, dc-b, ...)"
    )
    postgres: str | None = Field(None, description="PostgreSQL URI of the local stack, if any")
    server: str = Field(
        "http://127.0.0.1:8300", description="coordinator REST API the admin commands talk to"
    )
    api_token: str | None = Field(None, description="bearer token required on mutating calls")
    server_ca_file: str | None = Field(
        None, description="PEM CA that signed the coordinators' REST certificates (https)"
    )
    control_cluster: str | None = Field(
        None,
        description="alias of the cluster holding _crossfeed.state and the heartbeats, used "
        "by every service (default: the first configured cluster)",
    )
    log_format: Literal["text", "json"] = Field("text", description="log line format")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the lowest level of log line written"
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="/metrics port; 0 picks a free one")
    metrics_host: str = Field(
        "127.0.0.1",
        description="address /metrics and /status listen on (0.0.0.0 in containers, so "
        "Prometheus can scrape them)",
    )
    puller: PullerSettings = Field(default_factory=PullerSettings)  # type: ignore[arg-type]
    sink: SinkSettings = Field(default_factory=SinkSettings)  # type: ignore[arg-type]
    sorter: SorterSettings = Field(default_factory=SorterSettings)  # type: ignore[arg-type]
    coordinator: CoordinatorSettings = Field(
        default_factory=CoordinatorSettings  # type: ignore[arg-type]
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _FileSource(settings_cls))

    @field_validator("api_token")
    @classmethod
    def _token_reference(cls, value: str | None) -> str | None:
        return None if value is None else _resolved("api_token", value)

    @field_validator("clusters", mode="before")
    @classmethod
    def _wrap_properties(cls, value: object) -> object:
        # Files and env give {alias: {prop: value}}; the model wants {alias: {properties: ...}}.
        if not isinstance(value, dict):
            return value
        out: dict[str, object] = {}
        for alias, props in value.items():
            if not ALIAS_RE.match(str(alias)):
                raise ValueError(
                    f"cluster alias {alias!r} must be lowercase letters, digits and '-', "
                    "starting with a letter (e.g. dc-a)"
                )
            if isinstance(props, dict) and "properties" not in props:
                props = {"properties": _flat_properties(props)}
            out[str(alias)] = props
        return out

    @model_validator(mode="after")
    def _check_control_cluster(self) -> Settings:
        if self.control_cluster and self.control_cluster not in self.clusters:
            raise ValueError(
                f"control_cluster {self.control_cluster!r} is not a configured cluster "
                f"alias; known: {sorted(self.clusters) or 'none'}"
            )
        return self

    def control_alias(self) -> str:
        """The cluster holding ``_crossfeed.state`` and the heartbeats: ``control_cluster``,
        else the first configured one."""
        alias = self.control_cluster or next(iter(self.clusters), None)
        if alias is None:
            from crossfeed.config.errors import ConfigError

            raise ConfigError("no clusters configured: run 'crossfeed local up' or pass --config")
        return alias

    def staging_alias(self, sink_cluster: str | None) -> str:
        """The cluster holding a feed's internal topics (``.changes``, ``.sorted``, the
        DLQ): its Kafka target (``sink_cluster``), or, for a database target, the control
        cluster. Checked to be configured."""
        alias = sink_cluster or self.control_alias()
        self.cluster(alias)  # a ConfigError naming the known aliases
        return alias

    def cluster(self, alias: str) -> ClusterConfig:
        """The cluster named ``alias``, or a ConfigError that lists the known ones."""
        from crossfeed.config.errors import ConfigError

        try:
            return self.clusters[alias]
        except KeyError:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise ConfigError(
                f"unknown cluster alias {alias!r} (known: {known}); add "
                f"'{alias}.bootstrap.servers: host:port' to the configuration file "
                "or run 'crossfeed local up'"
            ) from None
