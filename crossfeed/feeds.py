"""The changefeed: one replication job, as users write it (CLI, REST, feed file).

A feed names its source cluster alias, its topic selection (names or regexes, with
exclusions), its target (``--sink-uri``: ``kafka://dc-b`` for mirror feeds,
``kafka://dc-b/TOPIC`` or ``postgresql://...`` for ordered feeds), its mode, its start
position and options. Everything is checked here, once, with messages that say what
to fix; the services trust a FeedSpec they are given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crossfeed.config.errors import ConfigError, from_validation_error, read_yaml
from crossfeed.core import gaps
from crossfeed.core.secrets import mask_text
from crossfeed.core.topic_selection import TopicSelector, rename
from crossfeed.wire.topics import debezium_ordered

FEED_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class FeedOptions(BaseModel):
    """Per-feed options (``--config key=value``); every key is declared here."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    errors_tolerance: Literal["all", "none"] = Field(
        "all",
        alias="errors.tolerance",
        description="all: bad records go to _crossfeed.dlq and the feed goes on; "
        "none: the feed stops with the error",
    )
    staging_partitions: int = Field(
        8,
        alias="staging.partitions",
        ge=1,
        le=1024,
        description="partitions of _crossfeed.<feed>.changes; one puller task each",
    )
    filter_reject_header: str | None = Field(
        None,
        alias="filter.reject.header",
        description="records carrying this header are rejected to the DLQ",
    )
    filter_reject_key_regex: str | None = Field(
        None,
        alias="filter.reject.key.regex",
        description="records whose key (UTF-8) fully matches are rejected to the DLQ",
    )
    lateness_ms: int = Field(
        1000,
        alias="lateness.ms",
        ge=0,
        description="ordered feeds, partitions without producer watermarks: resolved_ts = the "
        "newest commit_ts (or now, once caught up) minus this; a change arriving later than "
        "that goes to the DLQ (LateChange), so allow for the producers' delivery time",
    )

    target_shared: bool = Field(
        False,
        alias="target.shared",
        description="true: this feed may write the same target as another live feed (the "
        "same database and schema, the same Kafka topic, or the same mirror of the same "
        "source); by default creating such a feed is refused, naming the other",
    )
    postgres_auto_create: bool = Field(
        True,
        alias="postgres.auto.create",
        description="PostgreSQL sink: create missing tables and columns from the change "
        "events; false: such changes go to the DLQ",
    )
    input: Literal["crossfeed", "debezium"] = Field(
        "crossfeed",
        alias="input",
        description="ordered feeds: what writes the source topics: crossfeed's change "
        "producer, or Debezium (its data topics; the order comes from its transaction topic); "
        "also --input on the command line",
    )
    debezium_topic_prefix: str | None = Field(
        None,
        alias="debezium.topic.prefix",
        description="--input debezium: the connector's topic.prefix (its transaction topic is "
        "<prefix>.transaction); default: the topics' first name up to its first '.'",
    )
    schema_registry_url: str | None = Field(
        None,
        alias="schema.registry.url",
        description="--input debezium written in Avro (crossfeed cdc add --format avro): the "
        "Confluent-compatible API of the schema registry its records name their schemas in "
        "(Apicurio: http://HOST:PORT/apis/ccompat/v7); each schema is fetched once by id",
    )
    schema_registry_target_url: str | None = Field(
        None,
        alias="schema.registry.target_url",
        description="feeds into Kafka of records in Confluent's wire format: the target side's "
        "schema registry, kept a copy of schema.registry.url's (Apicurio Registry on both "
        "sides, ids kept) so that every record's schema is there before the record is "
        "committed on the target (docs/cdc.md)",
    )
    syncpoint_interval_s: float = Field(
        10.0,
        alias="syncpoint.interval",
        gt=0,
        description="PostgreSQL sink: seconds between rows of the syncpoint table",
    )

    # Active-active (docs/active-active.md): set on both feeds of a pair by
    # ``crossfeed pair create``; a feed with active_active.side applies last writer wins
    # on the target's own tables instead of the one-way hidden commit_ts.
    active_active_pair: str | None = Field(
        None,
        alias="active_active.pair",
        description="active-active: the pair this feed is one direction of",
    )
    active_active_side: str | None = Field(
        None,
        alias="active_active.side",
        description="active-active: the name of this feed's source side (e.g. dc-a); with "
        "it the PostgreSQL sink applies last writer wins on source commit times; equal "
        "times: the greater side name wins",
    )
    active_active_target_side: str | None = Field(
        None,
        alias="active_active.target_side",
        description="active-active: the name of this feed's target side (e.g. dc-b)",
    )
    active_active_counters: str | None = Field(
        None,
        alias="active_active.counters",
        description="active-active: counter columns, 'table.column,...': an update adds "
        "the difference its source transaction made (new - old) instead of setting the value",
    )
    active_active_tombstone_window_s: float = Field(
        86400.0,
        alias="active_active.tombstone_window_s",
        gt=0,
        description="active-active: seconds a delete is remembered, so an older update "
        "arriving later does not bring the row back",
    )
    active_active_conflicts_kept: int = Field(
        100_000,
        alias="active_active.conflicts_kept",
        ge=1,
        description="active-active: rows kept in crossfeed_conflicts per feed (the newest)",
    )

    @field_validator("active_active_counters")
    @classmethod
    def _counters(cls, value: str | None) -> str | None:
        for item in (value or "").split(","):
            if item.strip() and item.strip().count(".") != 1:
                raise ValueError(
                    f"active_active.counters item {item.strip()!r} must be table.column"
                )
        return value

    def counters(self) -> dict[str, frozenset[str]]:
        """active_active.counters as table -> its counter columns."""
        found: dict[str, set[str]] = {}
        for item in (self.active_active_counters or "").split(","):
            if item.strip():
                table, column = item.strip().split(".")
                found.setdefault(table, set()).add(column)
        return {table: frozenset(columns) for table, columns in found.items()}

    gap_policy: Literal["continue", "stop"] = Field(
        "continue",
        alias="gap.policy",
        description="what a task does when the next records it needs were deleted at the "
        "source before it copied them (retention, DeleteRecords): it always reports the "
        "gap (log, status, metric, a dead letter); continue: then copies on from the "
        "source's log start; stop: the partition waits until the gap is acknowledged "
        "(crossfeed changefeed ack-gap). The same for a consumer group whose position is "
        "in such records: continue moves it to the copy of the first record after them, "
        "stop leaves it until its position is acknowledged",
    )
    gap_acknowledged: str | None = Field(
        None,
        alias="gap.acknowledged",
        description="gaps acknowledged by an operator, topic/partition@offset as reported "
        "(a puller's gap, or a consumer group's position in deleted records), "
        "comma-separated (crossfeed changefeed ack-gap adds to it)",
    )

    @field_validator("gap_acknowledged")
    @classmethod
    def _gap_keys_parse(cls, value: str | None) -> str | None:
        for key in gaps.acknowledged(value):
            gaps.parse_key(key)
        return value

    @field_validator("filter_reject_key_regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as err:
                raise ValueError(
                    f"filter.reject.key.regex {value!r} does not compile: {err}"
                ) from None
        return value

    translate_groups: str = Field(
        ".*",
        alias="translate.groups",
        description="consumer groups whose offsets are translated to the target "
        "(regex, full match)",
    )
    translate_groups_exclude: str | None = Field(
        None,
        alias="translate.groups.exclude",
        description="consumer groups never translated (regex, full match)",
    )
    translate_topics_exclude: str | None = Field(
        None,
        alias="translate.topics.exclude",
        description="source topics whose group offsets are not translated (regex, full match)",
    )

    @field_validator("translate_groups", "translate_groups_exclude", "translate_topics_exclude")
    @classmethod
    def _translate_regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as err:
                raise ValueError(
                    f"{value!r} is not a regular expression ({err}); translate.* options "
                    "take one regex matched against whole names"
                ) from None
        return value


class SinkUri(BaseModel):
    """A parsed ``--sink-uri``."""

    model_config = ConfigDict(frozen=True)

    scheme: Literal["kafka", "postgresql"]
    cluster: str | None = None  # kafka: the target cluster alias
    topic: str | None = None  # kafka, ordered feeds: the one target topic
    dsn: str | None = None  # postgresql: the connection string
    schema_name: str | None = None  # postgresql: ?schema=S

    @classmethod
    def parse(cls, uri: str) -> SinkUri:
        """The parts of ``uri``; ValueError saying what is wrong (quoting the URI with its
        password masked: the message may reach a REST answer or a log)."""
        parsed = urlparse(uri)
        shown = mask_text(uri)
        if parsed.scheme == "kafka":
            if not parsed.netloc:
                raise ValueError(f"sink URI {shown!r} names no cluster; write kafka://dc-b")
            if "@" in parsed.netloc:
                alias = parsed.netloc.rsplit("@", 1)[1]
                raise ValueError(
                    f"sink URI {shown!r} carries credentials; a kafka:// URI names a cluster "
                    f"alias only (kafka://{alias}): put the credentials in the configuration "
                    f"file ({alias}.sasl.username, {alias}.sasl.password)"
                )
            topic = parsed.path.lstrip("/") or None
            return cls(scheme="kafka", cluster=parsed.netloc, topic=topic)
        if parsed.scheme in ("postgresql", "postgres"):
            schema = parse_qs(parsed.query).get("schema", [None])[0]
            dsn = uri.split("?", 1)[0].replace("postgres://", "postgresql://", 1)
            return cls(scheme="postgresql", dsn=dsn, schema_name=schema)
        raise ValueError(
            f"sink URI {shown!r} has an unknown scheme {parsed.scheme!r}; use kafka://CLUSTER "
            "or postgresql://USER@HOST:PORT/DB?schema=S"
        )


class FeedSpec(BaseModel):
    """One changefeed as created (the fields of ``crossfeed changefeed create``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str
    source: str = Field(description="source cluster alias")
    sink_uri: str = Field(alias="sink-uri", description="kafka://ALIAS[/TOPIC] or postgresql://…")
    topics: list[str] = Field(min_length=1, description="topic names or regexes (full match)")
    exclude: list[str] = Field(default_factory=list, description="names or regexes to leave out")
    mode: Literal["mirror", "ordered"] = "mirror"
    rename_format: str = Field("${topic}", alias="rename-format")
    start: Literal["earliest", "latest"] = "earliest"
    config: FeedOptions = Field(default_factory=FeedOptions)  # type: ignore[arg-type]

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not FEED_NAME_RE.match(value):
            raise ValueError(
                f"feed name {value!r} must be 1-63 lowercase letters, digits, '-' or '_', "
                "starting with a letter or digit (it becomes part of topic names)"
            )
        return value

    @field_validator("sink_uri")
    @classmethod
    def _sink_uri(cls, value: str) -> str:
        SinkUri.parse(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _input_option(cls, data: Any) -> Any:
        """``input`` may be given beside the other fields (``--input``); it is kept among
        the options. Debezium input is captured in one stream (its commit order), so by
        one puller task."""
        if not isinstance(data, dict):
            return data
        config = data.get("config")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            return data
        config = dict(config)
        if "input" in data:
            data = dict(data)
            config["input"] = data.pop("input")
        if config.get("input") == "debezium" and not (
            {"staging.partitions", "staging_partitions"} & set(config)
        ):
            config["staging.partitions"] = 1
        if config or "config" in data:
            data = {**data, "config": config}
        return data

    # Per field, so an error names the field and not the whole feed.
    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str]) -> list[str]:
        TopicSelector(value)  # raises ValueError naming a bad regex
        return value

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: list[str]) -> list[str]:
        TopicSelector((), value)
        return value

    @field_validator("rename_format")
    @classmethod
    def _rename_format(cls, value: str) -> str:
        rename("example", value)  # raises ValueError for an illegal format
        return value

    @model_validator(mode="after")
    def _consistent(self) -> FeedSpec:
        sink = self.sink
        if sink.scheme == "kafka" and sink.cluster == self.source:
            raise ValueError(
                f"source and target are both {self.source!r}; a feed copies between two clusters"
            )
        if self.mode == "mirror" and sink.scheme != "kafka":
            raise ValueError(
                "mode mirror needs a kafka:// sink URI; use --mode ordered for a database"
            )
        if self.mode == "mirror" and sink.topic:
            raise ValueError(
                "a mirror feed keeps topic names (see rename-format); drop the topic from the "
                "sink URI or use --mode ordered"
            )
        if self.mode == "ordered" and sink.scheme == "kafka" and not sink.topic:
            raise ValueError(
                "an ordered feed into Kafka names its target topic: kafka://dc-b/TOPIC"
            )
        if self.input == "debezium":
            if self.mode != "ordered":
                raise ValueError("--input debezium needs --mode ordered")
            if self.config.staging_partitions != 1:
                raise ValueError(
                    "--input debezium is captured in commit order by one puller task: "
                    "leave staging.partitions out (it is 1)"
                )
        if self.config.schema_registry_target_url is not None:
            if sink.scheme != "kafka":
                raise ValueError(
                    "schema.registry.target_url is for feeds into Kafka (mirror, or ordered "
                    "into kafka://CLUSTER/TOPIC)"
                )
            if not self.config.schema_registry_url:
                raise ValueError(
                    "schema.registry.target_url needs schema.registry.url: the registry to copy"
                )
        if self.config.active_active_side is not None:
            if sink.scheme != "postgresql" or self.input != "debezium":
                raise ValueError(
                    "active_active.side is for a Debezium feed into PostgreSQL "
                    "(--input debezium, --sink-uri postgresql://...)"
                )
            if not self.config.active_active_target_side:
                raise ValueError("active_active.side needs active_active.target_side")
            if self.config.active_active_target_side == self.config.active_active_side:
                raise ValueError("active_active.side and active_active.target_side must differ")
        return self

    @property
    def input(self) -> str:
        """What writes the source topics: ``crossfeed`` or ``debezium``."""
        return self.config.input

    @property
    def sink(self) -> SinkUri:
        return SinkUri.parse(self.sink_uri)

    @property
    def selector(self) -> TopicSelector:
        return TopicSelector(self.topics, self.exclude)

    def read_topics(self, names: Iterable[str]) -> list[str]:
        """The topics among ``names`` (of the source) that the feed's puller reads: the
        selected ones; with Debezium input, the one topic its Debezium reader writes in
        commit order (services/puller/debezium_reader.py), never Debezium's own."""
        if self.input == "debezium":
            ordered = debezium_ordered(self.name)
            return [ordered] if ordered in names else []
        return self.selector.select(names)

    def target_topic(self, source_topic: str) -> str:
        return rename(source_topic, self.rename_format)

    def debezium_prefix(self) -> str:
        """--input debezium: the connector's topic prefix (``debezium.topic.prefix``, else
        the first topic pattern's name up to its first ``.``: ``pg1\\.public\\..*`` ->
        ``pg1``)."""
        if self.config.debezium_topic_prefix:
            return self.config.debezium_topic_prefix
        # re.escape writes '-' as '\-' (and '_' is never special): unescape them first
        head = re.sub(r"\\([-_])", r"\1", self.topics[0]).replace("\\.", ".")
        return re.split(r"[.^$*+?()\[\]{}|\\]", head, maxsplit=1)[0]


def parse_feed(data: dict[str, Any], where: str) -> FeedSpec:
    """A FeedSpec from a mapping, or ConfigError naming field, value and fix."""
    try:
        return FeedSpec.model_validate(data)
    except ValidationError as err:
        raise from_validation_error(err, where) from None


def load_feed_file(path: str | Path) -> FeedSpec:
    """Read a YAML feed file (the fields of ``changefeed create``)."""
    path = Path(path)
    data = read_yaml(path, "feed file")
    if not isinstance(data, dict):
        raise ConfigError(f"feed file {path} must hold a mapping (name, source, sink-uri, topics…)")
    data = {
        str(k).replace("_", "-") if k in ("sink_uri", "rename_format") else k: v
        for k, v in data.items()
    }
    if isinstance(data.get("config"), dict):
        data["config"] = {str(k): v for k, v in data["config"].items()}
    return parse_feed(data, f"feed file {path}")


def target_of(spec: FeedSpec) -> tuple[str, ...]:
    """What a feed writes, as a comparable key: a database's (host, port, database,
    schema), a Kafka topic's (cluster, topic) for an ordered feed, and for a mirror feed
    its target cluster with everything that decides the target topics' names (source,
    topics, exclusions, rename format). Two live feeds with one key write the same
    tables or topics; feeds into different databases or clusters never share one (an
    active-active pair writes each side's own)."""
    sink = spec.sink
    if sink.scheme == "postgresql":
        parsed = urlparse(sink.dsn or "")
        return (
            "postgresql",
            (parsed.hostname or "localhost").lower(),
            str(parsed.port or 5432),
            parsed.path.lstrip("/"),
            sink.schema_name or "public",
        )
    if sink.topic:
        return ("kafka", sink.cluster or "", sink.topic)
    return (
        "kafka-mirror",
        sink.cluster or "",
        spec.source,
        "\n".join(sorted(spec.topics)),
        "\n".join(sorted(spec.exclude)),
        spec.rename_format,
    )


def describe_target(spec: FeedSpec) -> str:
    """The shared target in words, for the refusal."""
    sink = spec.sink
    if sink.scheme == "postgresql":
        key = target_of(spec)
        return f"schema {key[4]} of database {key[3]} on {key[1]}:{key[2]}"
    if sink.topic:
        return f"topic {sink.topic} on {sink.cluster}"
    return f"the same topics of {spec.source} on {sink.cluster}"
