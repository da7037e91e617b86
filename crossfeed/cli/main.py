"""Entry point of the ``crossfeed`` command (DESIGN.md §5)."""

from __future__ import annotations

from typing import Optional

import typer

from crossfeed import __version__
from crossfeed.cli import local, services
from crossfeed.cli.common import State, not_implemented

app = typer.Typer(
    help="crossfeed: exactly-once Kafka replication across data centers, consumer "
    "failover and failback, ordered change feeds.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def main(
    config: Optional[str] = typer.Option(  # noqa: UP045 - typer needs Optional here
        None, "--config", envvar="CROSSFEED_CONFIG", help="configuration file"
    ),
    log_format: Optional[str] = typer.Option(  # noqa: UP045
        None, "--log-format", help="text (default) or json"
    ),
) -> None:
    State.config = config
    State.log_format = log_format


@app.command()
def version() -> None:
    """Print the crossfeed version."""
    typer.echo(__version__)


app.add_typer(local.app, name="local")

changefeed = typer.Typer(help="Create and manage changefeeds (through the coordinator's REST API).")
app.add_typer(changefeed, name="changefeed")
for _verb in ("create", "list", "get", "pause", "resume", "remove"):

    def _make(verb: str) -> None:
        @changefeed.command(verb, help=f"{verb.capitalize()} changefeeds.")
        def _cmd() -> None:
            not_implemented(f"changefeed {verb}")

    _make(_verb)


@app.command()
def status() -> None:
    """Feeds, tasks, owners, lag and timestamps at a glance."""
    not_implemented("status")


@app.command()
def failover() -> None:
    """Stop a feed and move its consumer groups to the destination at their exact records."""
    not_implemented("failover")


@app.command()
def failback() -> None:
    """Return to the old primary: report extra data, start the reverse feed, translate back."""
    not_implemented("failback")


groups = typer.Typer(help="Consumer group offsets across clusters.")
app.add_typer(groups, name="groups")


@groups.command("translate")
def groups_translate() -> None:
    """Source offsets of a group and their exact destination offsets."""
    not_implemented("groups translate")


for _service, _what in (
    ("puller", "Copy source partitions into the feed's changes topic on the target."),
    ("sink", "Write staged changes into the target (Kafka topics or PostgreSQL)."),
    ("sorter", "Put change events of ordered feeds into commit order (Spark)."),
    ("coordinator", "Run feeds, assign tasks, translate offsets, serve the REST API."),
):
    _sub = typer.Typer(help=_what)
    app.add_typer(_sub, name=_service)
    if _service == "puller":
        _sub.command("run")(services.puller_run)
    elif _service == "sink":
        _sub.command("run")(services.sink_run)
    else:

        def _make_run(sub: typer.Typer, service: str) -> None:
            @sub.command("run", help=f"Run one {service} instance.")
            def _run() -> None:
                not_implemented(f"{service} run")

        _make_run(_sub, _service)


workload = typer.Typer(help="Generate test workloads.")
app.add_typer(workload, name="workload")


@workload.command("bank")
def workload_bank() -> None:
    """Bank transfers between accounts in different partitions (ordered-feed check)."""
    not_implemented("workload bank")


@app.command()
def demo() -> None:
    """The main job, end to end: replicate, lose dc-a, fail consumers over."""
    not_implemented("demo")


@app.command()
def bench(
    records: int = typer.Option(1_000_000, help="records in the backlog"),
    size: int = typer.Option(1024, help="bytes per record value"),
) -> None:
    """Benchmarks: mirror throughput, cost and end-to-end lag on the local stack."""
    from crossfeed.bench import report, runner

    path = runner.run(records, size)
    typer.echo(report.summary(path))


if __name__ == "__main__":
    app()
