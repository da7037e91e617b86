"""The Debezium PostgreSQL connector as crossfeed's ``--input debezium`` feeds need it, and
its registration on a Kafka Connect cluster (``crossfeed cdc add``).

What crossfeed relies on, and why each setting is here:

* ``plugin.name=pgoutput``: PostgreSQL's own logical decoding plugin (the connector's
  default, decoderbufs, is an extension that is not installed on a stock server);
* ``provide.transaction.metadata=true``: the transaction topic, whose END records give
  the commit order and each transaction's event count;
* ``heartbeat.interval.ms``: an idle database still moves the feed's consistency_ts;
* the JSON converter with schemas: the sink maps columns from the Connect schema in each
  event, and no schema registry is needed;
* ``tombstones.on.delete=false``: a delete is one event (a tombstone carries nothing the
  sink applies);
* ``skipped.operations=none``: a TRUNCATE is captured too (Debezium skips it by default);
* ``poll.interval.ms=100``: how long the connector waits for more events before it hands
  a batch to Connect when the database is quiet (the default, 500 ms, is added to every
  change's lag at low load);
* ``extended.headers.enabled=false``: no ``__debezium.context.*`` headers (connector name,
  task id, run id) on every event: nothing downstream reads them, and each header is
  carried, stored and parsed at every hop;
* ``topic.prefix``: the feed's topics are ``<prefix>.<schema>.<table>``, its transaction
  topic ``<prefix>.transaction``.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any
from urllib.parse import unquote, urlparse

from crossfeed.cdc.connect_api import ConnectError, request

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]{1,60}$")


def connector_config(
    database_uri: str,
    prefix: str,
    *,
    tables: list[str] | None = None,
    heartbeat_ms: int = 1000,
    replication_factor: int = 1,
    partitions: int = 1,
    snapshot_mode: str = "initial",
) -> dict[str, str]:
    """The connector's configuration for the database at ``database_uri``
    (``postgresql://USER[:PASSWORD]@HOST:PORT/DB``); ValueError naming what is wrong."""
    if not PREFIX_RE.match(prefix):
        raise ValueError(
            f"topic prefix {prefix!r} must be 1-60 letters, digits, '_' or '-' (it starts "
            "every topic name, and names the replication slot)"
        )
    parsed = urlparse(database_uri)
    if parsed.scheme not in ("postgresql", "postgres") or not parsed.hostname:
        raise ValueError(
            f"database URI {_masked(database_uri)!r} must look like "
            "postgresql://USER[:PASSWORD]@HOST:PORT/DB"
        )
    database = parsed.path.lstrip("/")
    if not database:
        raise ValueError(f"database URI {_masked(database_uri)!r} names no database")
    slot = slot_name(prefix)
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "database.hostname": parsed.hostname,
        "database.port": str(parsed.port or 5432),
        "database.user": unquote(parsed.username or "postgres"),
        "database.password": unquote(parsed.password or ""),
        "database.dbname": database,
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": slot,
        "publication.autocreate.mode": "filtered" if tables else "all_tables",
        "provide.transaction.metadata": "true",
        "heartbeat.interval.ms": str(heartbeat_ms),
        "poll.interval.ms": "100",
        "extended.headers.enabled": "false",
        "tombstones.on.delete": "false",
        "skipped.operations": "none",  # Debezium skips TRUNCATE by default
        "snapshot.mode": snapshot_mode,
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "true",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "true",
        "topic.creation.default.replication.factor": str(replication_factor),
        "topic.creation.default.partitions": str(partitions),
    }
    if tables:
        config["table.include.list"] = ",".join(tables)
    return config


def slot_name(prefix: str) -> str:
    """The connector's replication slot and publication, named after its topic prefix."""
    return "crossfeed_" + re.sub(r"[^a-z0-9_]", "_", prefix.lower())


def _masked(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.password is None:
        return uri
    return uri.replace(f":{parsed.password}@", ":***@", 1)


def register(connect_url: str, name: str, config: dict[str, str]) -> dict[str, Any]:
    """Create (or update) connector ``name`` on the Connect cluster; its answer."""
    answer = request(connect_url, "PUT", f"/connectors/{name}/config", config)
    return answer if isinstance(answer, dict) else {}


def status(connect_url: str, name: str) -> dict[str, Any]:
    answer = request(connect_url, "GET", f"/connectors/{name}/status")
    return answer if isinstance(answer, dict) else {}


def remove(connect_url: str, name: str) -> None:
    request(connect_url, "DELETE", f"/connectors/{name}")


def names(connect_url: str) -> list[str]:
    answer = request(connect_url, "GET", "/connectors")
    return [str(n) for n in answer] if isinstance(answer, list) else []


def wait_running(connect_url: str, name: str, timeout_s: float = 90.0) -> None:
    """Until the connector's task runs; RuntimeError if it failed, TimeoutError."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(ConnectError):
            last = status(connect_url, name)
            tasks = last.get("tasks", [])
            if tasks and all(t.get("state") == "RUNNING" for t in tasks):
                return
            if any(t.get("state") == "FAILED" for t in tasks):
                raise RuntimeError(f"connector {name} failed: {last}")
        time.sleep(0.5)
    raise TimeoutError(f"connector {name} not running within {timeout_s:.0f}s: {last}")
