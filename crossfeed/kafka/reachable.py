"""Is a cluster there at all? A TCP look at its bootstrap servers, before asking it anything
(a dead cluster costs a Kafka client its whole request timeout; a refused connect costs a
round trip). Used by offset translation and by the failover's scans."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """(host, port) of each ``bootstrap.servers`` entry ("h:p", "PROTO://h:p", "[v6]:p")."""
    out: list[tuple[str, int]] = []
    for entry in servers.split(","):
        entry = entry.strip().rpartition("://")[2]
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"bootstrap.servers entry {entry!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out


def accepts_connections(conf: Mapping[str, Any], timeout_s: float) -> bool:
    """Does any bootstrap server of ``conf`` accept a TCP connection within ``timeout_s``?

    A cheap first look at a cluster that may be gone: librdkafka keeps a request queued
    until its timeout while every connection is refused, so asking a dead cluster costs
    the whole timeout, where a refused connect costs a round trip. Accepting a connection
    proves little (the request proper still has its own timeout); refusing proves enough.
    """
    addresses = bootstrap_addresses(str(conf["bootstrap.servers"]))
    deadline = time.monotonic() + timeout_s
    for i, address in enumerate(addresses):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            # An equal share of what is left, so one black-holed host cannot use it all.
            with socket.create_connection(address, timeout=left / (len(addresses) - i)):
                return True
        except OSError:
            continue
    return False
