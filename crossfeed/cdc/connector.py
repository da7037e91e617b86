"""The Debezium PostgreSQL connector as crossfeed's ``--input debezium`` feeds need it, and
its registration on a Kafka Connect cluster (``crossfeed cdc add``).

What crossfeed relies on, and why each setting is here:

* ``plugin.name=pgoutput``: PostgreSQL's own logical decoding plugin (the connector's
  default, decoderbufs, is an extension that is not installed on a stock server);
* ``provide.transaction.metadata=true``: the transaction topic, whose END records give
  the commit order and each transaction's event count;
* ``heartbeat.interval.ms``: an idle database still moves the feed's consistency_ts;
* the format (``format``): Connect's JSON converter with schemas (the default: the sink
  maps columns from the Connect schema in each event, and no schema registry is needed),
  or Apicurio Registry's Avro converter in Confluent's wire format (``avro``: a magic byte
  0, the schema's 4-byte id in the registry, the Avro body), which Confluent's own clients
  read too: see :func:`avro_converter`;
* the database password by reference only (:func:`password_reference`): the worker's
  config providers read it, so neither Connect's config topic nor its REST API holds it;
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
from typing import Any, Final
from urllib.parse import unquote, urlparse

from crossfeed.cdc.connect_api import ConnectError, request

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
FORMATS = ("json", "avro")
PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]{1,60}$")
# crossfeed's secret references (docs/security.md), as a whole password
_ENV_REF = re.compile(r"^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")
_FILE_REF = re.compile(r"^\$\{file:(/[^}]*[^/}])\}$")
# The Connect worker's config providers these references are translated for (what the local
# stack's worker declares; a Connect cluster of one's own needs the same two lines).
WORKER_CONFIG_PROVIDERS: Final = {
    "config.providers": "env,dir",
    "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
    "config.providers.dir.class": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
}


def password_reference(password: str) -> str:
    """The connector's ``database.password`` for a database URI's password, which must be
    one of crossfeed's references: ``${env:NAME}`` stays as it is (Connect's
    EnvVarConfigProvider reads the worker's environment), ``${file:/dir/name}`` becomes
    ``${dir:/dir:name}`` (its DirectoryConfigProvider reads the file's content). A password in
    clear is refused: Connect would store it in its config topic and show it in its REST API."""
    if _ENV_REF.match(password):
        return password
    found = _FILE_REF.match(password)
    if found:
        directory, _, name = found.group(1).rpartition("/")
        return f"${{dir:{directory or '/'}:{name}}}"
    raise ValueError(
        "the database URI holds a password in clear, which Kafka Connect would keep in its "
        "config topic and show to anyone who may read a connector's config: give it by "
        "reference instead, postgresql://USER:${env:NAME}@HOST/DB (an environment variable of "
        "the Connect workers) or postgresql://USER:${file:/PATH}@HOST/DB (a file they can "
        "read), with the workers' config.providers set (docs/cdc.md)"
    )


def avro_converter(registry_url: str) -> dict[str, str]:
    """Apicurio Registry's Avro converter for the keys and values, in Confluent's wire
    format: the schema's content id (the id the registry's Confluent-compatible API gives
    it) in the 4-byte legacy id handler after a magic byte 0, nothing in headers; each
    table's key and value schemas registered on first use under ``<topic>-key`` and
    ``<topic>-value`` (Confluent's TopicNameStrategy), a new version when a column is
    added. ``registry_url``: the registry's root (``http://HOST:PORT``) or either API's URL."""
    native = registry_api_root(registry_url) + "/apis/registry/v2"
    config: dict[str, str] = {}
    for side in ("key", "value"):
        config[f"{side}.converter"] = AVRO_CONVERTER
        settings = {
            "apicurio.registry.url": native,
            "apicurio.registry.auto-register": "true",
            "apicurio.registry.find-latest": "true",
            "apicurio.registry.as-confluent": "true",
            "apicurio.registry.use-id": "contentId",
            "apicurio.registry.id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
            "apicurio.registry.headers.enabled": "false",
        }
        config.update({f"{side}.converter.{k}": v for k, v in settings.items()})
    return config


def registry_api_root(url: str) -> str:
    """An Apicurio Registry's root URL from its root or either of its APIs' URLs."""
    root = url.rstrip("/")
    for suffix in ("/apis/registry/v2", "/apis/ccompat/v7", "/apis/ccompat/v6"):
        if root.endswith(suffix):
            return root[: -len(suffix)]
    return root


def connector_config(
    database_uri: str,
    prefix: str,
    *,
    tables: list[str] | None = None,
    heartbeat_ms: int = 1000,
    replication_factor: int = 1,
    partitions: int = 1,
    snapshot_mode: str = "initial",
    format: str = "json",
    registry_url: str | None = None,
) -> dict[str, str]:
    """The connector's configuration for the database at ``database_uri``
    (``postgresql://USER[:PASSWORD]@HOST:PORT/DB``, a password only by reference: see
    :func:`password_reference`), in ``format`` (``json``, or ``avro`` against the registry
    at ``registry_url``); ValueError naming what is wrong."""
    if format not in FORMATS:
        raise ValueError(f"format {format!r}: json or avro")
    if format == "avro" and not registry_url:
        raise ValueError("the avro format needs a schema registry's URL (--registry)")
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
        "topic.creation.default.replication.factor": str(replication_factor),
        "topic.creation.default.partitions": str(partitions),
    }
    if parsed.password:
        config["database.password"] = password_reference(unquote(parsed.password))
    if format == "avro":
        assert registry_url is not None
        config.update(avro_converter(registry_url))
    else:
        config.update(
            {
                "key.converter": JSON_CONVERTER,
                "key.converter.schemas.enable": "true",
                "value.converter": JSON_CONVERTER,
                "value.converter.schemas.enable": "true",
            }
        )
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
