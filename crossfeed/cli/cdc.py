"""``crossfeed cdc add|config|status|remove``: the Debezium PostgreSQL connector on Kafka
Connect, configured as ``--input debezium`` feeds need it (crossfeed/cdc/connector.py)."""

from __future__ import annotations

import json
import re
from typing import Optional
from urllib.parse import quote, urlparse

import typer

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.cli.common import clean_errors, fail, out_console
from crossfeed.local.connect import REST_PORT
from crossfeed.local.postgres import SOURCE_URI
from crossfeed.local.registry import PORT as REGISTRY_PORT

app = typer.Typer(
    rich_markup_mode=None, help="Capture a PostgreSQL database with Debezium on Kafka Connect."
)

DEFAULT_CONNECT = f"http://127.0.0.1:{REST_PORT}"
ConnectOpt = typer.Option(
    DEFAULT_CONNECT, "--connect", help="Kafka Connect's REST URL (default: the local stack's)"
)


DEFAULT_REGISTRY = f"http://127.0.0.1:{REGISTRY_PORT}"


def _config(
    database: str,
    prefix: str,
    tables: list[str],
    heartbeat_ms: int,
    replication_factor: int,
    password: str | None,
    format: str,
    registry: str,
) -> dict[str, str]:
    try:
        return connector.connector_config(
            with_password(database, password) if password else database,
            prefix,
            tables=tables or None,
            heartbeat_ms=heartbeat_ms,
            replication_factor=replication_factor,
            format=format,
            registry_url=registry,
        )
    except ValueError as err:
        fail(str(err))


def with_password(database: str, password: str) -> str:
    """``database`` with ``password`` (a reference: ``${file:/path}`` holds slashes, which
    a URI's user part cannot) in its user part, percent-encoded."""
    parsed = urlparse(database)
    user = parsed.username or "postgres"
    host = parsed.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return parsed._replace(netloc=netloc).geturl()


DatabaseOpt = typer.Option(
    SOURCE_URI,
    "--database",
    help="postgresql://USER[:PASSWORD]@HOST:PORT/DB (default: the local stack's source, "
    "crossfeed local up --cdc); the server needs wal_level=logical",
)
PrefixOpt = typer.Option(..., "--prefix", help="topic prefix: topics are PREFIX.SCHEMA.TABLE")
TablesOpt = typer.Option([], "--table", help="schema.table to capture (repeat; default all)")
HeartbeatOpt = typer.Option(1000, "--heartbeat-ms", help="heartbeat interval (idle databases)")
ReplicationOpt = typer.Option(
    1, "--replication-factor", help="replication factor of the topics Connect creates"
)
PasswordOpt = typer.Option(
    None,
    "--password",
    help="the database password by reference, read by the Connect workers: ${env:NAME} or "
    "${file:/PATH} (a password in clear is refused; the URI may hold the reference instead)",
)
FormatOpt = typer.Option(
    "json",
    "--format",
    help="json (Connect's JSON converter, the schema in every event) or avro (Apicurio's Avro "
    "converter against --registry, Confluent's wire format)",
)
RegistryOpt = typer.Option(
    DEFAULT_REGISTRY,
    "--registry",
    help="--format avro: the Apicurio Registry the Connect workers register schemas in "
    "(default: the local stack's)",
)


@app.command()
@clean_errors
def add(
    name: str = typer.Argument(..., help="connector name"),
    prefix: str = PrefixOpt,
    database: str = DatabaseOpt,
    tables: list[str] = TablesOpt,
    heartbeat_ms: int = HeartbeatOpt,
    replication_factor: int = ReplicationOpt,
    password: Optional[str] = PasswordOpt,  # noqa: UP045
    format: str = FormatOpt,
    registry: str = RegistryOpt,
    connect: str = ConnectOpt,
) -> None:
    """Register the Debezium connector for a database (or update it)."""
    options = (heartbeat_ms, replication_factor, password, format, registry)
    config = _config(database, prefix, tables, *options)
    try:
        connector.register(connect, name, config)
    except ConnectError as err:
        fail(str(err))
    topics_opts = " ".join(f"--topics '{t}'" for t in feed_topics(prefix, tables))
    out_console.print(
        f"connector {name} registered on {connect}: topics {prefix}.<schema>.<table>, "
        f"transactions in {prefix}.transaction. Feed it with: crossfeed changefeed create "
        f"NAME --mode ordered --input debezium --source dc-a {topics_opts} --sink-uri ...",
        highlight=False,
        soft_wrap=True,
    )


def feed_topics(prefix: str, tables: list[str]) -> list[str]:
    """The ``--topics`` patterns of a feed of this connector's tables (docs/cdc.md): one
    per schema of ``--table schema.table``, else schema public's."""
    schemas = sorted({t.split(".", 1)[0] for t in tables if "." in t}) or ["public"]
    escaped = re.escape(prefix)
    return [f"{escaped}\\.{re.escape(schema)}\\..*" for schema in schemas]


@app.command("config")
@clean_errors
def show_config(
    prefix: str = PrefixOpt,
    database: str = DatabaseOpt,
    tables: list[str] = TablesOpt,
    heartbeat_ms: int = HeartbeatOpt,
    replication_factor: int = ReplicationOpt,
    password: Optional[str] = PasswordOpt,  # noqa: UP045
    format: str = FormatOpt,
    registry: str = RegistryOpt,
) -> None:
    """Print the connector's JSON configuration, for a Connect cluster of your own (its
    workers need the config providers env and dir: docs/cdc.md)."""
    options = (heartbeat_ms, replication_factor, password, format, registry)
    config = _config(database, prefix, tables, *options)
    typer.echo(json.dumps(config, indent=2))


@app.command()
@clean_errors
def status(
    name: Optional[str] = typer.Argument(None, help="connector name (default: all)"),  # noqa: UP045
    connect: str = ConnectOpt,
) -> None:
    """The state of the connector(s) and their task."""
    try:
        wanted = [name] if name else connector.names(connect)
        for one in wanted:
            found = connector.status(connect, one)
            tasks = ", ".join(
                f"task {t.get('id')} {t.get('state')}" for t in found.get("tasks", [])
            )
            state = found.get("connector", {}).get("state", "?")
            out_console.print(f"{one}: {state}; {tasks or 'no task'}", highlight=False)
    except ConnectError as err:
        fail(str(err))
    if not name and not wanted:
        out_console.print("no connectors")


@app.command()
@clean_errors
def remove(
    name: str = typer.Argument(..., help="connector name"),
    connect: str = ConnectOpt,
) -> None:
    """Delete the connector (its replication slot stays on the database: drop it with
    SELECT pg_drop_replication_slot('crossfeed_<prefix>') once nothing needs it)."""
    try:
        connector.remove(connect, name)
    except ConnectError as err:
        fail(str(err))
    out_console.print(f"connector {name} removed")
