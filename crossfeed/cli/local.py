"""``crossfeed local up|down|status|stop|start``: the local two-data-center stack."""

from __future__ import annotations

import typer

from crossfeed import paths
from crossfeed.cli.common import clean_errors, fail, out_console
from crossfeed.extras import require
from crossfeed.local import stack
from crossfeed.local.kafka import SetupMissing
from crossfeed.local.postgres import PORT as POSTGRES_PORT
from crossfeed.local.postgres import SOURCE_PORT
from crossfeed.local.secure import USER, SecureStack

app = typer.Typer(
    rich_markup_mode=None,
    help="Run two local Kafka clusters (dc-a, dc-b) and PostgreSQL on loopback; with "
    "--cdc or --active-active, Debezium on Kafka Connect capturing PostgreSQL too.",
)


@app.command()
@clean_errors
def up(
    no_postgres: bool = typer.Option(False, "--no-postgres", help="Kafka clusters only"),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="dc-a and dc-b over SASL_SSL with SCRAM (127.0.0.1:19094, 127.0.0.1:29094), "
        "with a CA made here; the password is written to a file the configuration refers to",
    ),
    cdc: bool = typer.Option(
        False,
        "--cdc",
        help="the capture side too: a source PostgreSQL (127.0.0.1:15432, wal_level=logical) "
        "Kafka Connect with Debezium (REST 127.0.0.1:18083) writing to dc-a, and a schema "
        "registry (Apicurio, 127.0.0.1:18081) for Debezium in Avro",
    ),
    active_active: bool = typer.Option(
        False,
        "--active-active",
        help="both sides captured, for 'crossfeed pair create' (implies --cdc): both "
        "PostgreSQL servers with wal_level=logical and track_commit_timestamp=on (restarted "
        "if they run without), and a second Kafka Connect with Debezium (REST "
        "127.0.0.1:28083) writing to dc-b",
    ),
) -> None:
    """Start dc-a (127.0.0.1:19092), dc-b (127.0.0.1:29092) and PostgreSQL (127.0.0.1:25432)."""
    if not no_postgres or cdc or active_active:
        require("postgres", "the local stack's PostgreSQL (or: crossfeed local up --no-postgres)")
    try:
        ids = stack.up(
            postgres=not no_postgres, secure_pair=secure, cdc=cdc, active_active=active_active
        )
    except (stack.StackError, SetupMissing, RuntimeError) as err:  # RuntimeError: openssl
        fail(str(err))
    secured = SecureStack.local()
    nodes = {n.alias: n for n in secured.nodes()} if secure else {}
    for alias, cluster_id in ids.items():
        where = f" on {nodes[alias].secure_bootstrap} (SASL_SSL)" if secure else ""
        out_console.print(f"{alias} up{where}, cluster.id {cluster_id}", highlight=False)
    if not no_postgres:
        out_console.print(f"postgres up on 127.0.0.1:{POSTGRES_PORT}", highlight=False)
    if cdc or active_active:
        out_console.print(
            f"postgres-a (source) up on 127.0.0.1:{SOURCE_PORT}; Kafka Connect with Debezium "
            f"on {stack.connect_worker().url}; schema registry on {stack.registry().url}",
            highlight=False,
            soft_wrap=True,
        )
    if active_active:
        out_console.print(
            f"both PostgreSQL servers with wal_level=logical, track_commit_timestamp=on; "
            f"Kafka Connect with Debezium writing to dc-b on {stack.connect_worker_b().url}",
            highlight=False,
            soft_wrap=True,
        )
    if secure:
        out_console.print(
            f"user {USER}, password in {secured.password_file}, CA {secured.certs.ca}",
            highlight=False,
            soft_wrap=True,
        )
    out_console.print(f"wrote {paths.local_config()}", highlight=False)


@app.command()
@clean_errors
def down() -> None:
    """Stop every part of the local stack, the secured pair too (data stays under .crossfeed/)."""
    stopped = stack.down()
    out_console.print("stopped " + (", ".join(stopped) if stopped else "nothing (not running)"))


@app.command()
@clean_errors
def status() -> None:
    """Say what runs where."""
    for part in stack.status():
        state = "answering" if part.answering else ("not answering" if part.pid else "stopped")
        pid = f"pid {part.pid}" if part.pid else "-"
        out_console.print(
            f"{part.name:<13} {part.address:<16} {pid:<10} {state:<13} {part.detail}"
            f"  (log {part.log})",
            highlight=False,
            soft_wrap=True,
        )


@app.command()
@clean_errors
def stop(
    cluster: str = typer.Argument(..., help="dc-a or dc-b"),
    kill: bool = typer.Option(False, "--kill", help="kill -9 instead of a clean shutdown"),
) -> None:
    """Stop one cluster without touching the other (losing a data center); of the pair the
    last 'crossfeed local up' started (plain or --secure)."""
    try:
        was_running = stack.stop(cluster, hard=kill, secure_pair=stack.secured())
    except stack.StackError as err:
        fail(str(err))
    out_console.print(f"{cluster} {'stopped' if was_running else 'was not running'}")


@app.command()
@clean_errors
def start(cluster: str = typer.Argument(..., help="dc-a or dc-b")) -> None:
    """Start one stopped cluster again (regaining a data center)."""
    try:
        cluster_id = stack.start(cluster, secure_pair=stack.secured())
    except (stack.StackError, SetupMissing) as err:
        fail(str(err))
    out_console.print(f"{cluster} up, cluster.id {cluster_id}", highlight=False)


@app.command("archive-classes")
@clean_errors
def archive_classes(
    no_spark: bool = typer.Option(False, "--no-spark", help="leave the Spark driver's out"),
) -> None:
    """Record the class archives the JVMs start from.

    make setup runs this: a broker, a Connect worker and a sorter's Spark driver run once
    on free loopback ports and write the classes they loaded; later starts map them."""
    from crossfeed.local.archive_training import TrainingError, record

    try:
        kinds = record(spark=not no_spark)
    except (TrainingError, SetupMissing, OSError) as err:
        fail(f"class archives not recorded (the JVMs start without them): {err}")
    out_console.print(f"class archives recorded: {', '.join(kinds)}", highlight=False)
