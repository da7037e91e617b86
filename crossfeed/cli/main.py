"""Entry point of the ``crossfeed`` command (docs/design.md, Interfaces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from crossfeed import __version__
from crossfeed import log as logsetup
from crossfeed.cli import admin, cdc, feed_ops, local, pair, services
from crossfeed.cli.common import State, clean_errors, fail
from crossfeed.extras import require

app = typer.Typer(
    rich_markup_mode=None,
    help="crossfeed: exactly-once Kafka replication across data centers, consumer "
    "failover and failback, ordered change feeds.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(given: bool) -> None:
    if given:
        typer.echo(f"crossfeed {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    config: Optional[str] = typer.Option(  # noqa: UP045 - typer needs Optional here
        None, "--config", envvar="CROSSFEED_CONFIG", help="configuration file"
    ),
    log_format: Optional[str] = typer.Option(  # noqa: UP045
        None, "--log-format", help="text (default) or json"
    ),
    _version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="print the crossfeed version and exit",
    ),
) -> None:
    State.config = config
    State.log_format = log_format
    # No librdkafka line reaches the terminal of a command; a service's own log set-up
    # (crossfeed/service.py) shows them at DEBUG.
    logsetup.quiet_librdkafka()


@app.command()
def version() -> None:
    """Print the crossfeed version."""
    typer.echo(__version__)


@app.command()
def settings(
    write: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--write",
        help="put the reference into this page between its markers (docs/configuration.md)",
    ),
) -> None:
    """Print the settings reference (Markdown), generated from their declarations."""
    from crossfeed.config import reference

    if write is None:
        typer.echo(reference.markdown(), nl=False)
    else:
        changed = reference.write(write)
        typer.echo(f"{write}: {'updated' if changed else 'already current'}")


app.add_typer(local.app, name="local")
app.add_typer(cdc.app, name="cdc")
app.add_typer(pair.app, name="pair")

app.add_typer(admin.changefeed, name="changefeed")  # feed_ops adds update and restart
app.add_typer(feed_ops.capture, name="capture")
app.command("status")(admin.status)


_FeedOpt = typer.Option(..., "--feed", help="feed name")
_FeedFileOpt = typer.Option(
    None, "--feed-file", help="the feed's file, for a feed the coordinator does not run"
)


@app.command()
@admin.api_errors
def failover(
    feed: str = _FeedOpt,
    feed_file: Optional[str] = _FeedFileOpt,  # noqa: UP045
    as_json: bool = admin.JsonOpt,
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Stop a feed and move its consumer groups to the destination at their exact records;
    an ordered feed: fence its target and report what it holds and what was lost."""
    from crossfeed.cli import translation as commands

    commands.failover(feed, feed_file, as_json, server)


_SourceDbOpt = typer.Option(
    None,
    "--source-database",
    help="a database feed: the captured database, postgresql://USER[:PASSWORD]@HOST:PORT/DB "
    "(default: the local stack's for the feed's side)",
)
_SourceConnectOpt = typer.Option(
    None, "--source-connect", help="a database feed: Connect REST URL running its connector"
)
_ReverseConnectOpt = typer.Option(
    None,
    "--reverse-connect",
    help="a database feed: Connect REST URL on the target's side, for the reverse capture",
)
_ReverseClusterOpt = typer.Option(
    "", "--reverse-cluster", help="the cluster alias --reverse-connect writes to"
)


@app.command()
@admin.api_errors
def switchover(
    feed: str = _FeedOpt,
    source_database: Optional[str] = _SourceDbOpt,  # noqa: UP045
    source_connect: Optional[str] = _SourceConnectOpt,  # noqa: UP045
    reverse_connect: Optional[str] = _ReverseConnectOpt,  # noqa: UP045
    reverse_cluster: str = _ReverseClusterOpt,
    reverse_name: str = typer.Option(
        "", "--reverse-name", help="the reverse feed's name (default: FEED-r1, FEED-r2, ...)"
    ),
    drain_timeout: float = typer.Option(
        120.0, "--drain-timeout", help="seconds to wait for the target to apply everything"
    ),
    as_json: bool = admin.JsonOpt,
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """A database feed changes direction with nothing lost: the source turns read-only,
    the target takes the writes, a reverse feed carries them back."""
    from crossfeed.cli import dr

    places = dr.sides(
        dr.feed_source(server, feed), source_database, source_connect, reverse_connect
    )
    options = {
        "reverse_cluster": reverse_cluster,
        "reverse_name": reverse_name,
        "drain_timeout_s": drain_timeout,
    }
    dr.switchover(feed, places, options, as_json, server)


@app.command()
@admin.api_errors
def failback(
    feed: str = _FeedOpt,
    feed_file: Optional[str] = _FeedFileOpt,  # noqa: UP045
    source_database: Optional[str] = _SourceDbOpt,  # noqa: UP045
    source_connect: Optional[str] = _SourceConnectOpt,  # noqa: UP045
    reverse_connect: Optional[str] = _ReverseConnectOpt,  # noqa: UP045
    reverse_cluster: str = _ReverseClusterOpt,
    switch_back: bool = typer.Option(
        False,
        "--switch-back",
        help="a database feed: wait until the reverse feed (its services running) caught up, "
        "then switch the direction back",
    ),
    replay_extra: bool = typer.Option(
        False, "--replay-extra", help="copy the old primary's unreplicated records over first"
    ),
    reverse_feed: Optional[str] = typer.Option(  # noqa: UP045
        None, "--reverse-feed", help="name of the reverse feed (default FEED-reverse)"
    ),
    reverse_feed_file: Optional[str] = typer.Option(  # noqa: UP045
        None, "--reverse-feed-file", help="write the reverse feed's file here (feed-file feeds)"
    ),
    reverse_start: str = typer.Option(
        "frontier", "--reverse-start", help="frontier (default) or earliest"
    ),
    keep_reverse: bool = typer.Option(
        False,
        "--keep-reverse",
        help="keep the reverse feed once failback is complete (default: removed)",
    ),
    wait: float = typer.Option(
        0.0,
        "--wait",
        help="seconds to wait for the reverse feed, and for members of groups on the old "
        "primary to leave",
    ),
    as_json: bool = admin.JsonOpt,
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Return to the old primary: report extra data, start the reverse feed, translate back.
    A database feed: list the old primary's divergent tail, re-seed it, switch back."""
    from crossfeed.cli import dr
    from crossfeed.cli import translation as commands

    if source_database or (feed_file is None and dr.is_database_feed(server, feed)):
        places = dr.sides(
            dr.feed_source(server, feed), source_database, source_connect, reverse_connect
        )
        options = {"reverse_cluster": reverse_cluster, "switch_back": switch_back}
        options["reverse_name"] = reverse_feed or ""
        if wait:
            options["catch_up_timeout_s"] = wait
        dr.failback(feed, places, options, as_json, server)
        return

    commands.failback(
        feed,
        feed_file,
        replay_extra=replay_extra,
        reverse_feed=reverse_feed,
        reverse_feed_file=reverse_feed_file,
        reverse_start=reverse_start,
        keep_reverse=keep_reverse,
        wait_s=wait,
        as_json=as_json,
        server=server,
    )


groups = typer.Typer(rich_markup_mode=None, help="Consumer group offsets across clusters.")
app.add_typer(groups, name="groups")


@groups.command("translate")
@admin.api_errors
def groups_translate(
    feed: str = _FeedOpt,
    group: str = typer.Option(..., "--group", help="consumer group id"),
    feed_file: Optional[str] = _FeedFileOpt,  # noqa: UP045
    as_json: bool = admin.JsonOpt,
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Source offsets of a group and their exact destination offsets."""
    from crossfeed.cli import translation as commands

    commands.translate(feed, group, feed_file, as_json, server)


for _service, _what in (
    (
        "puller",
        "Copy source partitions: mirror feeds into the target topics, ordered feeds "
        "into their changes topic.",
    ),
    ("sink", "Apply an ordered feed's sorted changes to its target (a Kafka topic or PostgreSQL)."),
    ("sorter", "Put change events of ordered feeds into commit order (Spark)."),
    ("coordinator", "Run feeds, assign tasks, translate offsets, serve the REST API."),
):
    _sub = typer.Typer(rich_markup_mode=None, help=_what)
    app.add_typer(_sub, name=_service)
    if _service == "puller":
        _sub.command("run")(services.puller_run)
    elif _service == "sink":
        _sub.command("run")(services.sink_run)
    elif _service == "sorter":
        _sub.command("run")(services.sorter_run)
    else:
        _sub.command("run")(admin.coordinator_run)


workload = typer.Typer(rich_markup_mode=None, help="Generate test workloads.")
app.add_typer(workload, name="workload")


@workload.command("bank")
def workload_bank(
    topic: str = typer.Option(..., "--topic", help="source topic (created if absent)"),
    accounts: int = typer.Option(1000, "--accounts", min=2, help="number of accounts"),
    rate: float = typer.Option(
        1000.0, "--rate", min=0, help="transactions per second (0: as fast as possible)"
    ),
    seconds: Optional[float] = typer.Option(  # noqa: UP045
        None, "--seconds", min=0, help="stop after this long"
    ),
    transactions: Optional[int] = typer.Option(  # noqa: UP045
        None, "--transactions", min=0, help="stop after this many transfers"
    ),
    partitions: int = typer.Option(8, "--partitions", min=2, help="partitions of a new topic"),
    bootstrap: Optional[str] = typer.Option(  # noqa: UP045
        None, "--bootstrap", help="bootstrap servers (instead of --cluster)"
    ),
    cluster: Optional[str] = typer.Option(  # noqa: UP045
        None, "--cluster", help="cluster alias from the configuration (default: the first)"
    ),
    skew_partition: Optional[int] = typer.Option(  # noqa: UP045
        None, "--skew-partition", min=0, help="write this partition's records late ..."
    ),
    skew_ms: int = typer.Option(0, "--skew-ms", min=0, help="... by this many milliseconds"),
    initial_balance: int = typer.Option(1000, "--initial-balance", min=1),
    seed: Optional[int] = typer.Option(None, "--seed", help="random seed"),  # noqa: UP045
    resolved_interval_ms: int = typer.Option(
        200, "--resolved-interval-ms", min=1, help="watermarks to every partition this often"
    ),
) -> None:
    """Bank transfers between accounts in different partitions (ordered-feed check).

    One opening transaction creates every account (table accounts: id, balance), then
    each transaction moves an amount between two accounts in different partitions, until
    --seconds or --transactions (or Ctrl-C). Ends with a one-line JSON summary
    (transactions, events, initial total, last commit_ts).
    """
    import json
    import signal

    from crossfeed.cli.common import fail, settings
    from crossfeed.config import ConfigError
    from crossfeed.workload.run import run_bank

    if (skew_partition is None) != (skew_ms == 0):
        fail("--skew-partition and --skew-ms go together")
    if bootstrap and cluster:
        fail("give --bootstrap or --cluster, not both")
    if bootstrap:
        conf: dict[str, object] = {"bootstrap.servers": bootstrap}
    else:
        try:
            config = settings()
            alias = cluster or next(iter(config.clusters), None)
            if alias is None:
                fail("no cluster configured: give --bootstrap HOST:PORT or --cluster ALIAS")
            conf = dict(config.cluster(alias).client_config())
        except ConfigError as err:
            fail(str(err))
    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        summary, _ = run_bank(
            conf,
            topic,
            accounts=accounts,
            partitions=partitions,
            rate=rate,
            seconds=seconds,
            transactions=transactions,
            skew_partition=skew_partition,
            skew_ms=skew_ms,
            initial_balance=initial_balance,
            seed=seed,
            resolved_interval_s=resolved_interval_ms / 1000,
            stop=lambda: stopping,
        )
    except (ValueError, RuntimeError) as err:
        fail(str(err))
    typer.echo(json.dumps(summary.as_dict()))


@app.command()
def demo(
    no_tty: bool = typer.Option(False, "--no-tty", help="plain lines instead of a live table"),
    records: int = typer.Option(6000, help="orders the producer writes to dc-a"),
    rate: Optional[float] = typer.Option(  # noqa: UP045
        None,
        help="orders per second (default 1000); --ordered: transfers per second (200); "
        "--cdc: transactions per second (100)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    ordered: bool = typer.Option(
        False,
        "--ordered",
        help="the ordered feed instead: bank transfers from dc-a into PostgreSQL in commit "
        "order through the Spark sorter",
    ),
    cdc: bool = typer.Option(
        False,
        "--cdc",
        help="a PostgreSQL database captured by Debezium instead: SQL transactions from "
        "concurrent sessions into another PostgreSQL, compared row for row at the end",
    ),
    active_active: bool = typer.Option(
        False,
        "--active-active",
        help="two PostgreSQL databases both writing instead: the SQL bank on both at once, "
        "an active-active pair keeping them equal (last writer wins, balances as counters)",
    ),
    dr: bool = typer.Option(
        False,
        "--dr",
        help="a database feed across a lost data center instead: dc-a killed under the SQL "
        "bank, failover to dc-b, failback listing the lost tail, switchover back",
    ),
    seconds: float = typer.Option(
        30.0, help="--ordered, --cdc, --active-active, --dr: how long the bank workload runs"
    ),
    format: str = typer.Option(
        "json",
        "--format",
        help="--cdc: the connector's format, json or avro (Confluent's wire format, with the "
        "local stack's schema registry)",
    ),
) -> None:
    """The main job, end to end: replicate, lose dc-a, fail consumers over (or, with
    --ordered, an ordered feed into PostgreSQL that never shows a torn transfer; with
    --cdc, the same from a PostgreSQL database captured by Debezium). Exits 1 when
    --cdc finds a torn sample or tables that differ."""
    import json
    import signal

    from crossfeed.client.rest import ApiError
    from crossfeed.demo.display import Display
    from crossfeed.demo.scenario import Demo
    from crossfeed.local.kafka import SetupMissing
    from crossfeed.local.stack import StackError

    if sum((ordered, cdc, active_active, dr)) > 1:
        fail("--ordered, --cdc, --active-active and --dr are separate demos: choose one")
    if format not in ("json", "avro") or (format != "json" and not cdc):
        fail("--format is json or avro, and for --cdc only")
    # The demo runs coordinators and the local stack's PostgreSQL; --ordered and --cdc the
    # sorter too.
    bank = ordered or cdc or active_active or dr
    for extra in ("coordinator", "postgres", *(("sorter",) if bank else ())):
        clean_errors(require)(extra, "crossfeed demo")
    logsetup.setup("WARNING")  # the demo tells its own story; keep library chatter out

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: services stopped, dc-a back

    signal.signal(signal.SIGTERM, on_term)
    view = (
        "cdc" if cdc or dr else "ordered" if ordered else "active-active" if active_active else ""
    )
    display = Display(tty=not no_tty, view=view or "mirror")
    try:
        if dr:
            from crossfeed.demo.dr import DrDemo

            summary: Any = DrDemo(seconds, rate or 20.0, display.say, display.progress).run()
        elif active_active:
            from crossfeed.demo.active_active import ActiveActiveDemo

            summary = ActiveActiveDemo(seconds, rate or 50.0, display.say, display.progress).run()
        elif cdc:
            from crossfeed.demo.cdc import CdcDemo

            summary = CdcDemo(
                seconds, rate or 100.0, display.say, display.progress, format=format
            ).run()
        elif ordered:
            from crossfeed.demo.ordered import OrderedDemo

            summary = OrderedDemo(seconds, rate or 200.0, display.say, display.progress).run()
        else:
            summary = Demo(records, rate or 1000.0, display.say, display.progress).run()
    except KeyboardInterrupt:
        display.close()
        raise typer.Exit(130) from None
    except (StackError, SetupMissing, TimeoutError, RuntimeError, ApiError) as err:
        display.close()
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    display.close()
    if as_json:
        typer.echo(json.dumps(summary.as_dict()))
    else:
        typer.echo("\n".join(["", "summary", *summary.lines()]))
    if not getattr(summary, "ok", True):
        raise typer.Exit(1)


@app.command()
def bench(
    records: Optional[int] = typer.Option(  # noqa: UP045
        None, help="records per backlog (default 1,000,000; 100,000 with --quick)"
    ),
    size: Optional[list[int]] = typer.Option(  # noqa: UP045
        None, "--size", help="bytes per record value; repeat for several (default 1024 and 100)"
    ),
    repeat: Optional[int] = typer.Option(  # noqa: UP045
        None, min=1, help="repetitions of every scenario (default 3; 1 with --quick)"
    ),
    quick: bool = typer.Option(False, "--quick", help="a small validation run, not for comparison"),
    only: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--only",
        help="run one part: throughput, failover, ordered, scale, cdc, active_active or dr",
    ),
    lag_seconds: Optional[float] = typer.Option(  # noqa: UP045
        None, "--lag-seconds", help="each lag phase's length (at least 20 s for cdc)"
    ),
    aa_rate: Optional[float] = typer.Option(  # noqa: UP045
        None,
        "--aa-rate",
        min=1,
        help="active_active: transfers/s per direction (default: half of Debezium's rate)",
    ),
) -> None:
    """Benchmarks vs MirrorMaker 2 and dc-b's produce ceiling: throughput, cost, lag, failover."""
    import dataclasses

    from crossfeed.bench import report, runner

    plan = runner.Plan.quick_plan(repeat) if quick else runner.Plan()
    changes: dict[str, object] = {}
    if records is not None:
        changes["records"] = records
    if size:
        changes["sizes"] = tuple(size)
    if repeat is not None:
        changes["repeat"] = repeat
    parts = ("throughput", "failover", "ordered", "scale", "cdc", "active_active", "dr")
    if only not in (None, *parts):
        raise typer.BadParameter(f"--only takes {', '.join(parts[:-1])} or {parts[-1]}")
    if aa_rate is not None:
        changes["aa_rate"] = aa_rate
    if lag_seconds is not None:
        changes["lag_seconds"] = lag_seconds
        changes["aa_lag_seconds"] = lag_seconds
    if only:
        changes["throughput"] = only == "throughput"
        changes["failover"] = only == "failover"
        changes["ordered"] = only == "ordered"
        changes["scale"] = only == "scale"
        changes["cdc"] = only == "cdc"
        changes["active_active"] = only == "active_active"
        changes["dr"] = only == "dr"
    plan = dataclasses.replace(plan, **changes)  # type: ignore[arg-type]
    try:
        path = runner.run(plan)
    except KeyboardInterrupt as stopped:
        typer.echo(f"interrupted; cleaned up; partial results: {stopped}", err=True)
        raise typer.Exit(130) from None
    except RuntimeError as err:  # the stack did not come up, another benchmark runs, …
        typer.echo(f"bench: {err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(report.summary(path))


SHORT_HELP = {
    "settings": "Print the settings reference (Markdown).",
    "failover": "Fail a feed over: its consumers, or its database target.",
    "switchover": "Reverse a database feed with nothing lost.",
    "failback": "Return to the old primary after a failover.",
    "demo": "Run the demo: replicate, lose dc-a, fail over.",
    "bench": "Benchmark beside MirrorMaker 2 and the brokers.",
    "local": "Run dc-a, dc-b and PostgreSQL on this machine.",
    "local up": "Start the local clusters and PostgreSQL.",
    "local down": "Stop every part of the local stack.",
    "local stop": "Stop one cluster (losing a data center).",
    "cdc config": "Print the connector's configuration.",
    "cdc remove": "Delete the connector (its slot stays).",
    "pair": "Active-active: two PostgreSQL databases writing.",
    "pair create": "Join two databases both ways.",
    "pair status": "Both directions, connectors and checks.",
    "pair remove": "Remove both feeds and connectors.",
    "changefeed": "Create and manage changefeeds.",
    "changefeed create": "Create a changefeed.",
    "changefeed update": "Change a changefeed's topics or options.",
    "changefeed ack-gap": "Acknowledge records lost at the source.",
    "changefeed restart": "Restart a changefeed's tasks.",
    "puller": "Copy source partitions into the target cluster.",
    "puller run": "Run one puller instance.",
    "sink": "Apply an ordered feed's sorted changes.",
    "sink run": "Run one sink instance of an ordered feed.",
    "sorter run": "Run the sorter of an ordered feed.",
    "coordinator": "Run feeds, assign tasks, serve the REST API.",
    "workload bank": "Bank transfers across partitions.",
}
"""The line a command list shows for a command whose first sentence is too long for it
(click would cut it mid-phrase), by its path; its own --help keeps the whole text."""


def _shorten(typer_app: typer.Typer, path: str = "") -> None:
    for command in typer_app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        short = SHORT_HELP.get(f"{path}{name}".replace("_", "-"))
        if short and not command.short_help:
            command.short_help = short
    for group in typer_app.registered_groups:
        short = SHORT_HELP.get(f"{path}{group.name}")
        if short and not group.short_help:
            group.short_help = short
        if group.typer_instance is not None:
            _shorten(group.typer_instance, f"{path}{group.name} ")


_shorten(app)

if __name__ == "__main__":
    app()
