"""A mirror that follows its source when the target refuses what following takes, on the
secured pair (``crossfeed local up --secure``, tests/support/secured.py): the pullers run
as a user of their own that may do everything on both clusters except, on the target
topic, Alter (add partitions) and AlterConfigs (sync its configs), as a cluster whose
operators keep those rights to themselves would have it (docs/operating.md, "What
follows the source")."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from crossfeed.kafka import clients
from crossfeed.kafka.topics import overridden_configs
from tests.integration.test_coordinator_process import wait_for
from tests.integration.test_secured_clusters import create_topic
from tests.support.clusters import Clusters
from tests.support.secured import add_user
from tests.support.verify import by_partition, read_many

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

LITERAL, ALLOW, DENY = ResourcePatternType.LITERAL, AclPermissionType.ALLOW, AclPermissionType.DENY


def _acls(config: dict[str, Any], bindings: list[AclBinding], *, delete: bool = False) -> None:
    admin = clients.admin(config)  # the super user; kept until the futures complete
    if delete:
        filters = [
            AclBindingFilter(
                b.restype,
                b.name,
                b.resource_pattern_type,
                b.principal,
                b.host,
                b.operation,
                b.permission_type,
            )
            for b in bindings
        ]
        for future in admin.delete_acls(filters).values():
            future.result(30)
        return
    for future in admin.create_acls(bindings).values():
        future.result(30)


def _everything(principal: str) -> list[AclBinding]:
    """Every right on every topic, group, transactional id and the cluster."""
    out = [
        AclBinding(kind, "*", LITERAL, principal, "*", AclOperation.ALL, ALLOW)
        for kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    ]
    out.append(
        AclBinding(
            ResourceType.BROKER, "kafka-cluster", LITERAL, principal, "*", AclOperation.ALL, ALLOW
        )
    )
    return out


def test_a_target_that_refuses_partitions_is_an_error_and_one_that_refuses_a_config_a_notice(
    secure: Clusters, services: Any
) -> None:
    a, b = secure.a.config, secure.b.config
    topic = create_topic(a, 2)
    user = f"puller-{uuid.uuid4().hex[:6]}"
    principal = f"User:{user}"
    limited = {c.alias: add_user(c, user, "puller-secret") for c in (secure.a, secure.b)}
    for config in (a, b):
        _acls(config, _everything(principal))
    denied = [
        AclBinding(ResourceType.TOPIC, topic, LITERAL, principal, "*", operation, DENY)
        for operation in (AclOperation.ALTER, AclOperation.ALTER_CONFIGS)
    ]
    _acls(b, denied)
    producer = clients.producer(a)

    def produce(partitions: range, count: int) -> None:
        for n in range(count):
            for partition in partitions:
                producer.produce(topic, value=b"v%d" % n, partition=partition)
        producer.flush(30)

    produce(range(2), 50)
    settings = {"puller": {"topic_refresh_s": 2, "config_sync_interval_s": 2}}
    feed = services.start_feed("refused", limited, [topic], settings=settings)
    puller = feed.pullers[0]
    read_many(b, [topic], expect=100, timeout_s=60)

    # A config changed at the source that the target refuses: a notice, the feed runs on.
    admin_a = clients.admin(a)  # kept until the futures complete
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin_a.incremental_alter_configs([resource])[resource].result(30)
    status = puller.wait_status(
        lambda s: any("refuses config retention.ms" in n for n in s["notices"]),
        30,
        "the refused config in the notices",
    )
    assert status["state"] == "normal" and status["last_error"] is None
    (notice,) = [n for n in status["notices"] if "refuses config" in n]
    assert f"target topic {topic} refuses config retention.ms from its source" in notice
    assert "not synced" in notice
    assert "retention.ms" not in overridden_configs(clients.admin(b), topic)
    produce(range(2), 10)
    read_many(b, [topic], expect=120, timeout_s=60)  # still copying

    # Partitions added at the source, which the target refuses to add: the feed's error
    # state says which topic and how to fix it; the partitions it has are copied on.
    admin_a.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    status = puller.wait_state("error", 30)
    error = status["last_error"]
    assert f"target topic {topic!r} has 2 partition(s) but source topic {topic!r} has 4" in error
    assert f"allow crossfeed's principal to Alter topic {topic!r}" in error
    assert f"kafka-topics.sh --alter --topic {topic} --partitions 4" in error
    produce(range(2), 10)
    read_many(b, [topic], expect=140, timeout_s=60)
    assert len(clients.admin(b).list_topics(topic, timeout=10).topics[topic].partitions) == 2

    # The rights given: the feed resumes by itself, grows the topic, copies the new
    # partitions from their first offset and takes the config.
    _acls(b, denied, delete=True)
    producer = clients.producer(a)  # one that knows the four partitions
    produce(range(4), 5)
    puller.wait_state("normal", 60)
    target = read_many(b, [topic], expect=160, timeout_s=60)
    counts = {p: len(records) for (_, p), records in by_partition(target).items()}
    assert counts == {0: 75, 1: 75, 2: 5, 3: 5}
    wait_for(
        lambda: overridden_configs(clients.admin(b), topic).get("retention.ms") == "3600000",
        30,
        "the config synced once allowed",
    )
    puller.wait_status(
        lambda s: not [n for n in s["notices"] if "refuses config" in n], 30, "no refusal left"
    )
