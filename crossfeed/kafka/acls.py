"""Reading and creating topic ACLs (crossfeed/core/acls.py decides which)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from crossfeed.core.acls import TopicAcl


def topic_acls(admin: AdminClient, timeout_s: float = 30.0) -> list[TopicAcl] | None:
    """Every ACL on a topic resource of the cluster; None when it has no authorizer.
    KafkaException otherwise (no Describe right on the cluster, say)."""
    any_value: Any = None  # a filter's None matches any name, principal, host (stubs say str)
    wanted = AclBindingFilter(
        ResourceType.TOPIC,
        any_value,
        ResourcePatternType.ANY,
        any_value,
        any_value,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    try:
        found = admin.describe_acls(wanted, request_timeout=timeout_s).result(timeout_s + 5)
    except KafkaException as err:
        if err.args and err.args[0].code() == KafkaError.SECURITY_DISABLED:
            return None
        raise
    return [
        TopicAcl(
            b.principal,
            b.host,
            b.operation.name,
            b.permission_type.name,
            b.resource_pattern_type.name,
            b.name,
        )
        for b in found
    ]


def create_topic_acls(admin: AdminClient, rules: Sequence[TopicAcl]) -> dict[TopicAcl, str]:
    """Create ``rules`` in one request; the ones refused, with why."""
    if not rules:
        return {}
    bindings = {
        rule: AclBinding(
            ResourceType.TOPIC,
            rule.topic,
            ResourcePatternType[rule.pattern],
            rule.principal,
            rule.host,
            AclOperation[rule.operation],
            AclPermissionType[rule.permission],
        )
        for rule in rules
    }
    futures = admin.create_acls(list(bindings.values()), request_timeout=30)
    refused: dict[TopicAcl, str] = {}
    for rule, binding in bindings.items():
        try:
            futures[binding].result(timeout=35)
        except KafkaException as err:
            refused[rule] = err.args[0].str() if err.args else str(err)
    return refused
