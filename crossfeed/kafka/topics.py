"""Creating and describing topics: idempotent, with errors that say what to fix."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from crossfeed.wire import topics as wire_topics

log = logging.getLogger(__name__)

DYNAMIC_TOPIC_CONFIG = 1  # ConfigSource.DYNAMIC_TOPIC_CONFIG
CREATE_BATCH = 200  # topics per CreateTopics request (the controller takes big ones slowly)
VISIBLE_TIMEOUT_S = 30  # how long a created topic may take to appear in the metadata


def ensure_topic(
    admin: AdminClient, name: str, partitions: int, config: dict[str, str] | None = None
) -> bool:
    """Create ``name`` unless it exists; True if this call created it. Either way it
    returns once the cluster's metadata lists the topic with its partitions: the controller
    answers the creation before every broker's metadata has it, and a client that asks in
    between is told the topic does not exist (seen here under load, right after creating)."""
    outcome = ensure_topics(admin, [NewTopicSpec(name, partitions, config or {})])[name]
    if isinstance(outcome, KafkaException):
        raise outcome
    return outcome


@dataclass(frozen=True)
class NewTopicSpec:
    """A topic to create: its name, partition count and topic-level configs."""

    name: str
    partitions: int
    config: dict[str, str]


def ensure_topics(
    admin: AdminClient, wanted: Sequence[NewTopicSpec]
) -> dict[str, bool | KafkaException]:
    """:func:`ensure_topic` for many topics, ``CREATE_BATCH`` to a request: name -> True
    (created), False (it existed) or the KafkaException that refused it (the others are
    created all the same). Returns once the metadata lists every topic not refused."""
    if not wanted:
        return {}
    futures: dict[str, Any] = {}
    for start in range(0, len(wanted), CREATE_BATCH):
        futures |= admin.create_topics(
            [
                NewTopic(
                    t.name, num_partitions=t.partitions, replication_factor=-1, config=t.config
                )
                for t in wanted[start : start + CREATE_BATCH]
            ],
            operation_timeout=30,
        )
    outcome: dict[str, bool | KafkaException] = {}
    for spec in wanted:
        try:
            futures[spec.name].result(timeout=60)
            outcome[spec.name] = True
            log.info(
                "created topic %s (%d partitions, %s)", spec.name, spec.partitions, spec.config
            )
        except KafkaException as err:
            exists = err.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
            outcome[spec.name] = False if exists else err
    _wait_visible(admin, [n for n, o in outcome.items() if not isinstance(o, KafkaException)])
    return outcome


def _wait_visible(admin: AdminClient, names: list[str]) -> None:
    if not names:
        return
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    while True:
        if len(names) == 1:  # one topic's metadata is a smaller answer than the cluster's
            missing = names if partition_count(admin, names[0]) is None else []
        else:
            counts = partition_counts(admin)
            missing = [n for n in names if not counts.get(n)]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"topic(s) {', '.join(missing[:5])} not in the cluster's metadata "
                f"{VISIBLE_TIMEOUT_S} s after creating them"
            )
        time.sleep(0.05)


def add_partitions(admin: AdminClient, wanted: dict[str, int]) -> dict[str, KafkaException | None]:
    """Grow each topic of ``wanted`` (name -> partition count) to that many partitions,
    in one CreatePartitions request: name -> None once the cluster's metadata lists them
    (grown now, or by someone else meanwhile), or the KafkaException that refused it (no
    Alter right, a policy, the topic gone)."""
    if not wanted:
        return {}
    futures = admin.create_partitions(
        [NewPartitions(name, count) for name, count in sorted(wanted.items())],
        operation_timeout=30,
    )
    outcome: dict[str, KafkaException | None] = {}
    for name, count in sorted(wanted.items()):
        try:
            futures[name].result(timeout=60)
            outcome[name] = None
            log.info("topic %s now has %d partitions", name, count)
        except KafkaException as err:
            # INVALID_PARTITIONS: it has that many already (another puller grew it).
            grown = (
                err.args[0].code() == KafkaError.INVALID_PARTITIONS
                and (partition_count(admin, name) or 0) >= count
            )
            outcome[name] = None if grown else err
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    for name in [n for n, o in outcome.items() if o is None]:
        while (partition_count(admin, name) or 0) < wanted[name]:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"topic {name}'s {wanted[name]} partitions not in the cluster's metadata "
                    f"{VISIBLE_TIMEOUT_S} s after adding them"
                )
            time.sleep(0.05)
    return outcome


def ensure_internal(admin: AdminClient, name: str, partitions: int = 1) -> bool:
    """Create one of crossfeed's internal topics unless it exists, with its configs from
    the wire contract (crossfeed/wire/topics.py: internal_config); True if created."""
    return ensure_topic(admin, name, partitions, wire_topics.internal_config(name))


def partition_counts(admin: AdminClient, timeout_s: float = 10.0) -> dict[str, int]:
    """Every topic of the cluster with its partition count."""
    meta = admin.list_topics(timeout=timeout_s)
    return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}


def partitions_of(
    admin: AdminClient, wanted: Callable[[str], bool], timeout_s: float = 10.0
) -> list[tuple[str, int]]:
    """Every (topic, partition) of the cluster's topics that ``wanted`` selects, sorted."""
    meta = admin.list_topics(timeout=timeout_s)
    return sorted(
        (name, p)
        for name, info in meta.topics.items()
        if info.error is None and wanted(name)
        for p in info.partitions
    )


def partition_count(admin: AdminClient, name: str, timeout_s: float = 10.0) -> int | None:
    """Partitions of one topic, or None while the cluster cannot describe it."""
    topic = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
    if topic is None or topic.error is not None or not topic.partitions:
        return None
    return len(topic.partitions)


def overridden_configs(
    admin: AdminClient, topic: str, keys: tuple[str, ...] | None = None
) -> dict[str, str]:
    """The topic-level overrides (not broker defaults), among ``keys`` if given."""
    found = overridden_configs_of(admin, [topic], keys)[topic]
    if isinstance(found, KafkaException):
        raise found
    return found


def overridden_configs_of(
    admin: AdminClient, names: Sequence[str], keys: tuple[str, ...] | None = None
) -> dict[str, dict[str, str] | KafkaException]:
    """:func:`overridden_configs` of many topics (every override with ``keys`` None),
    asked in one request: name -> the overrides, or the KafkaException of a topic the
    cluster could not describe (deleted meanwhile, say)."""
    out: dict[str, dict[str, str] | KafkaException] = {}
    for name, entries in _describe(admin, names).items():
        out[name] = (
            entries
            if isinstance(entries, KafkaException)
            else {
                key: entry.value
                for key, entry in entries.items()
                if (keys is None or key in keys)
                and entry.source == DYNAMIC_TOPIC_CONFIG
                and entry.value is not None
            }
        )
    return out


def alter_topic_configs(
    admin: AdminClient, wanted: dict[str, tuple[dict[str, str], tuple[str, ...]]]
) -> dict[str, dict[str, str]]:
    """Set and delete topic-level configs (IncrementalAlterConfigs), one request for
    every topic of ``wanted`` (name -> (configs to set, overrides to delete)). A topic
    the cluster refuses as a whole is asked again one config at a time, so one refused
    config (a policy, a value its brokers do not accept) holds back no other: returns
    name -> {config: why it was refused} for the configs not changed."""
    refused: dict[str, dict[str, str]] = {}
    failed = _alter(admin, wanted)
    singles: dict[tuple[str, str], tuple[dict[str, str], tuple[str, ...]]] = {}
    for name in failed:
        to_set, to_delete = wanted[name]
        singles.update(((name, k), ({k: v}, ())) for k, v in to_set.items())
        singles.update(((name, k), ({}, (k,))) for k in to_delete)
    for (name, key), change in singles.items():
        why = _alter(admin, {name: change}).get(name)
        if why is not None:
            refused.setdefault(name, {})[key] = why
    return refused


def _alter(
    admin: AdminClient, wanted: dict[str, tuple[dict[str, str], tuple[str, ...]]]
) -> dict[str, str]:
    """One IncrementalAlterConfigs request; name -> why, for the topics refused."""
    if not wanted:
        return {}
    resources = {
        name: ConfigResource(
            ConfigResource.Type.TOPIC,
            name,
            incremental_configs=[
                *(
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                    for k, v in sorted(to_set.items())
                ),
                *(
                    ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in to_delete
                ),
            ],
        )
        for name, (to_set, to_delete) in sorted(wanted.items())
    }
    futures = admin.incremental_alter_configs(list(resources.values()))
    failed: dict[str, str] = {}
    for name, resource in resources.items():
        try:
            futures[resource].result(timeout=30)
        except KafkaException as err:
            failed[name] = err.args[0].str() if err.args else str(err)
    return failed


def _describe(
    admin: AdminClient, names: Sequence[str]
) -> dict[str, dict[str, Any] | KafkaException]:
    """Every config entry of each topic in ``names``, in one DescribeConfigs request."""
    if not names:
        return {}
    resources = {n: ConfigResource(ConfigResource.Type.TOPIC, n) for n in names}
    futures = admin.describe_configs(list(resources.values()))
    out: dict[str, dict[str, Any] | KafkaException] = {}
    for name, resource in resources.items():
        try:
            out[name] = futures[resource].result(timeout=30)
        except KafkaException as err:
            out[name] = err
    return out


def effective_configs(
    admin: AdminClient, topic: str, keys: tuple[str, ...]
) -> dict[str, str | None]:
    """The effective values (override or default) of ``keys`` of one topic, in one
    request; KafkaException if the cluster cannot describe it."""
    entries = _describe(admin, [topic])[topic]
    if isinstance(entries, KafkaException):
        raise entries
    return {key: None if key not in entries else entries[key].value for key in keys}


def config_value(admin: AdminClient, topic: str, key: str) -> str | None:
    """The effective value of one topic config (override or default)."""
    return effective_configs(admin, topic, (key,))[key]


def config_values(
    admin: AdminClient, names: Sequence[str], key: str
) -> dict[str, str | KafkaException | None]:
    """:func:`config_value` of many topics, asked in one request (a topic the cluster
    could not describe: its KafkaException)."""
    out: dict[str, str | KafkaException | None] = {}
    for name, entries in _describe(admin, names).items():
        if isinstance(entries, KafkaException):
            out[name] = entries
        else:
            entry = entries.get(key)
            out[name] = None if entry is None else entry.value
    return out
