"""What the client library's own producers share: the settings that reach a cluster, and
creating a topic they write to (once, bounded, never raising)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

log = logging.getLogger(__name__)

# Settings a client needs to reach a cluster (a producer for the same one inherits them).
_KEYS: Final = ("bootstrap.servers", "security.protocol", "client.dns.lookup")
_PREFIXES: Final = ("sasl.", "ssl.")


def connection_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``conf`` that say how to reach and log in to its cluster."""
    return {k: v for k, v in conf.items() if k in _KEYS or k.startswith(_PREFIXES)}


def create_topic(
    admin: AdminClient,
    topic: NewTopic,
    timeout_s: float,
    where: object,
) -> bool:
    """Create ``topic``; True if it exists now. A failure (a cluster that does not answer,
    no right to) is logged with ``where`` and is False."""
    try:
        futures = admin.create_topics([topic], operation_timeout=timeout_s)
        futures[topic.topic].result(timeout_s + 1)
    except KafkaException as err:
        if err.args and err.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return True
        log.warning("cannot create %s on %s: %s", topic.topic, where, err)
        return False
    except Exception as err:  # a timeout: the cluster does not answer now
        log.warning("cannot create %s on %s: %s", topic.topic, where, err)
        return False
    return True
