"""Per-client overrides of a cluster's properties, MirrorMaker 2 style (pure, no I/O).

A cluster alias's properties apply to every client crossfeed makes of that cluster;
those prefixed ``consumer.``, ``producer.`` or ``admin.`` apply only to that kind of
client, and win over the cluster-wide ones::

    dc-a.bootstrap.servers: kafka-a:9093
    dc-a.sasl.username: crossfeed            # every client
    dc-a.consumer.fetch.max.bytes: 10485760  # consumers only
    dc-a.producer.linger.ms: 20              # producers only

(No librdkafka property starts with one of these words, so the prefixes are free.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

CLIENT_KINDS: Final = ("consumer", "producer", "admin")


def split_kind(key: str) -> tuple[str | None, str]:
    """(the client kind a key is for, or None for every client; the property name)."""
    kind, dot, rest = key.partition(".")
    if dot and kind in CLIENT_KINDS:
        return kind, rest
    return None, key


def for_client(properties: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The properties a client of ``kind`` gets: the cluster-wide ones, then the ones
    prefixed ``<kind>.`` (prefix removed) over them; other kinds' are left out."""
    if kind not in CLIENT_KINDS:
        raise ValueError(f"client kind {kind!r} is not one of {', '.join(CLIENT_KINDS)}")
    shared: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in properties.items():
        target, name = split_kind(key)
        if target is None:
            shared[key] = value
        elif target == kind:
            own[name] = value
    return {**shared, **own}


def check(properties: Mapping[str, Any]) -> None:
    """ValueError for a per-client key with nothing after its prefix (``consumer.``)."""
    for key in properties:
        kind, name = split_kind(key)
        if kind is not None and not name:
            raise ValueError(f"{key!r} names no property: write e.g. {kind}.client.id")
