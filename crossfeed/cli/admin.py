"""Admin commands over the coordinator's REST API only (docs/design.md, Interfaces), and
``crossfeed coordinator run``.

``crossfeed changefeed create|list|get|pause|resume|remove`` and ``crossfeed status``
(``update``, ``restart`` and ``capture list``: feed_ops.py) talk to ``--server``, else
``$CROSSFEED_SERVER``, else ``server`` from the settings (default http://127.0.0.1:8300;
several, comma-separated, are tried in turn), with the bearer token ``api_token`` /
``$CROSSFEED_API_TOKEN``. An error prints the server's one-line message and exits 1.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Optional, TypeVar
from urllib.parse import quote

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crossfeed.cli.common import clean_errors, fail, settings
from crossfeed.cli.takeover_render import primary_line
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.extras import require
from crossfeed.feeds import load_feed_file

F = TypeVar("F", bound=Callable[..., Any])

changefeed = typer.Typer(
    rich_markup_mode=None,
    help="Create and manage changefeeds (through the coordinator's REST API).",
    no_args_is_help=True,
)

ServerOpt = typer.Option(
    None,
    "--server",
    envvar="CROSSFEED_SERVER",
    help="coordinator REST API; several comma-separated are tried in turn "
    "(default: 'server' from the settings, http://127.0.0.1:8300)",
)
JsonOpt = typer.Option(False, "--json", help="print the server's JSON instead of a table")
# The feed's fields, shared by 'create' and 'update'.
SourceOpt = typer.Option(None, "--source", help="source cluster alias")
SinkUriOpt = typer.Option(
    None, "--sink-uri", help="kafka://ALIAS (mirror), kafka://ALIAS/TOPIC or postgresql://…"
)
TopicsOpt = typer.Option([], "--topics", help="topic name or regex; repeatable")
ExcludeOpt = typer.Option([], "--exclude", help="name or regex to leave out; repeatable")
RenameOpt = typer.Option(None, "--rename-format", help="target topic name, default '${topic}'")
ConfigOpt = typer.Option([], "--config", help="feed option key=value; repeatable")
FeedFileOpt = typer.Option(None, "--feed-file", help="YAML file with the feed's fields")
STATE_STYLE = {
    "normal": "green",
    "paused": "yellow",
    "error": "red",
    "failed": "bold red",
    "removed": "dim",
    "failed_over": "magenta",
}


def console() -> Console:
    """stdout; colours only in a terminal, wide plain lines when piped."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def api_errors(func: F) -> F:
    """An ApiError becomes the server's message on one line and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ApiError as err:
            fail(err.message)

    return clean_errors(wrapper)  # type: ignore[return-value]


def client(server: str | None) -> CoordinatorClient:
    config = settings()
    return CoordinatorClient(
        server or config.server, config.api_token, ca_file=config.server_ca_file
    )


def printed_raw(rows: list[dict[str, Any]], as_json: bool, if_none: str) -> bool:
    """Print ``rows`` as JSON (--json) or ``if_none`` when empty; False: make a table."""
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return True
    if not rows:
        typer.echo(if_none)
        return True
    return False


def parse_options(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--config expects key=value (e.g. --config staging.partitions=4), got {pair!r}")
        options[key.strip()] = value.strip()
    return options


def feed_file_body(feed_file: str, name: str | None) -> dict[str, Any]:
    """The request body for the feed in ``feed_file`` (whose name must be ``name``)."""
    spec = load_feed_file(feed_file)
    if name and name != spec.name:
        fail(f"NAME {name!r} does not match the name {spec.name!r} in {feed_file}")
    body: dict[str, Any] = spec.model_dump(by_alias=True, exclude_unset=True)
    body["config"] = spec.config.model_dump(by_alias=True, exclude_unset=True)
    return body


def fields_given(given: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line (None or an empty list: not given)."""
    return {key: value for key, value in given.items() if value not in (None, [])}


# -- changefeed ---------------------------------------------------------------------------


@changefeed.command("create")
@api_errors
def create(
    name: Optional[str] = typer.Argument(None, help="feed name (or give --feed-file)"),  # noqa: UP045
    source: Optional[str] = SourceOpt,  # noqa: UP045
    sink_uri: Optional[str] = SinkUriOpt,  # noqa: UP045
    topics: list[str] = TopicsOpt,
    exclude: list[str] = ExcludeOpt,
    mode: Optional[str] = typer.Option(None, "--mode", help="mirror (default) or ordered"),  # noqa: UP045
    input_: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--input",
        help="ordered feeds: crossfeed (default: its change producer) or debezium "
        "(Debezium's topics, in the order of its transaction topic)",
    ),
    rename_format: Optional[str] = RenameOpt,  # noqa: UP045
    start: Optional[str] = typer.Option(None, "--start", help="earliest (default) or latest"),  # noqa: UP045
    config: list[str] = ConfigOpt,
    feed_file: Optional[str] = FeedFileOpt,  # noqa: UP045
    shared_target: bool = typer.Option(
        False,
        "--shared-target",
        help="let this feed write a target another feed writes (target.shared=true)",
    ),
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """Create a changefeed: --source dc-a --sink-uri kafka://dc-b --topics 'orders.*'."""
    if feed_file:
        body = feed_file_body(feed_file, name)
    else:
        if not name:
            fail("give the feed NAME (or --feed-file FILE)")
        given = {
            "source": source,
            "sink-uri": sink_uri,
            "mode": mode,
            "input": input_,
            "rename-format": rename_format,
            "start": start,
            "topics": topics,
            "exclude": exclude,
        }
        body = {"name": name, "topics": [], "exclude": []} | fields_given(given)
        if config:
            body["config"] = parse_options(config)
    if shared_target:
        body["config"] = {**body.get("config", {}), "target.shared": "true"}
    with client(server) as api:
        feed = api.create_feed(body)
    console().print(
        f"created changefeed [bold]{feed['name']}[/]: {feed['source']} -> {feed['sink_uri']}, "
        f"{feed['mode']}, topics {', '.join(feed['topics'])}; state {feed['state']}"
    )


@changefeed.command("list")
@api_errors
def list_feeds(
    include_removed: bool = typer.Option(False, "--all", help="include removed feeds"),
    as_json: bool = JsonOpt,
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """List changefeeds."""
    with client(server) as api:
        feeds = api.list_feeds(include_removed)
    if printed_raw(feeds, as_json, "no changefeeds; create one with 'crossfeed changefeed create'"):
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("NAME", "STATE", "SOURCE", "SINK", "MODE", "TOPICS"):
        table.add_column(column)
    for feed in feeds:
        table.add_row(
            feed["name"],
            _state(feed["state"]),
            feed["source"],
            feed["sink_uri"],
            feed["mode"],
            ", ".join(feed["topics"]) + excluding(feed["exclude"]),
        )
    console().print(table)


@changefeed.command("get")
@api_errors
def get(
    name: str = typer.Argument(..., help="feed name"),
    as_json: bool = JsonOpt,
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """Show one changefeed: its definition, state, tasks and timestamps."""
    with client(server) as api:
        detail = api.get_feed(name)
    if as_json:
        typer.echo(json.dumps(detail, indent=2))
        return
    feed, status = detail["feed"], detail["status"]
    out = console()
    rows = [
        ("name", feed["name"]),
        ("state", _state(feed["state"])),
        ("last error", feed["last_error"] or "-"),
        ("source", feed["source"]),
        ("sink", feed["sink_uri"]),
        ("mode", feed["mode"]),
        ("topics", ", ".join(feed["topics"]) + excluding(feed["exclude"])),
        ("rename format", feed["rename_format"]),
        ("start", feed["start"]),
        ("options", ", ".join(f"{k}={v}" for k, v in feed["config"].items()) or "-"),
        ("created", _ms(feed["created_at_ms"])),
        ("tasks", _owners(status)),
        ("assignment", f"generation {status['generation']}, epoch {status['epoch']}"),
        ("resolved_ts", _ts(status["resolved_ts_us"])),
        ("checkpoint_ts", _ts(status["checkpoint_ts_us"])),
        ("consistency_ts", _ts(status["consistency_ts_us"])),
        ("lag", _lag(status["lag_s"])),
    ]
    if status.get("syncpoint_ts_us"):
        rows.append(("syncpoint", _syncpoint(status)))
    if status.get("idle_since_us"):
        rows.append(("source", _idle(status)))
    elif status.get("held_back_by"):
        rows.append(("held back by", _held_back(status)))
    if feed["state"] == "failed_over" and feed["mode"] == "ordered":
        rows.append(("primary", _primary(server, name)))
    for key, value in rows:
        out.print(f"{key + ':':<16}{value}")


def _primary(server: str | None, name: str) -> str:
    """Who is the primary of a failed-over ordered feed (its report kept on the target)."""
    try:
        with client(server) as api:
            kept = api.request("GET", f"/v1/failover/{quote(name, safe='')}")
    except ApiError as err:
        return f"the target (its failover report cannot be read: {err})"
    return primary_line(kept) if kept else "the target"


def _act(verb: str) -> Callable[..., None]:
    @api_errors
    def command(
        name: str = typer.Argument(..., help="feed name"),
        server: Optional[str] = ServerOpt,  # noqa: UP045
    ) -> None:
        with client(server) as api:
            feed = getattr(api, f"{verb}_feed")(name)
        console().print(f"changefeed [bold]{feed['name']}[/] is {_state(feed['state'])}")

    return command


changefeed.command("pause", help="Stop a changefeed's tasks; its position is kept.")(_act("pause"))
changefeed.command("resume", help="Run a paused (or failed) changefeed again.")(_act("resume"))
changefeed.command("remove", help="Stop a changefeed for good.")(_act("remove"))


# -- status -------------------------------------------------------------------------------


@api_errors
def status(
    as_json: bool = JsonOpt,
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """Feeds, tasks, owners, lag and timestamps at a glance."""
    with client(server) as api:
        feeds = api.status()
        ha = api.ha_status()
    if as_json:
        typer.echo(json.dumps({"feeds": feeds, "ha": ha}, indent=2))
        return
    out = console()
    leader = ha["leader"] or "none"
    out.print(f"coordinator leader: {leader} (epoch {ha['epoch']}), asked {ha['instance_id']}")
    if not feeds:
        out.print("no changefeeds; create one with 'crossfeed changefeed create'")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("FEED", "STATE", "TASKS", "RESOLVED", "CHECKPOINT", "CONSISTENCY", "LAG"):
        table.add_column(column)
    for feed in feeds:
        table.add_row(
            feed["name"],
            _state(feed["state"]),
            _owners(feed),
            _ts(feed["resolved_ts_us"]),
            _ts(feed["checkpoint_ts_us"]),
            _ts(feed["consistency_ts_us"]),
            _lag(feed["lag_s"]),
        )
    out.print(table)
    for feed in feeds:
        if feed.get("syncpoint_ts_us"):
            out.print(f"{feed['name']}: syncpoint {_syncpoint(feed)}")
        if feed.get("idle_since_us"):
            out.print(f"{feed['name']}: source {_idle(feed)}")
        elif feed.get("held_back_by"):
            out.print(f"[yellow]{feed['name']}[/]: resolved_ts held back by {_held_back(feed)}")
        if feed.get("commits"):  # mirror feeds, from the leader: how groups are translated
            name = feed["name"] if feed["commits"] == "stream" else f"[yellow]{feed['name']}[/]"
            out.print(f"{name}: commits: {escape(feed['commits'])}")
    pairs: dict[str, list[str]] = {}
    for feed in feeds:
        if feed.get("pair"):
            pairs.setdefault(feed["pair"], []).append(feed["name"])
    for pair, directions in sorted(pairs.items()):
        out.print(
            f"pair {pair}: {' and '.join(directions)}; connectors and schema findings: "
            f"crossfeed pair status {pair}"
        )
    for feed in feeds:
        for notice in feed.get("notices", []):
            out.print(f"[yellow]{feed['name']}[/]: {escape(notice)}")
        if feed["last_error"]:
            out.print(f"[red]{feed['name']}[/]: {feed['last_error']}")


# -- coordinator run ----------------------------------------------------------------------


@clean_errors
def coordinator_run(
    host: Optional[str] = typer.Option(  # noqa: UP045
        None, "--host", help="REST listen address (default 127.0.0.1)"
    ),
    port: Optional[int] = typer.Option(None, "--port", help="REST port (default 8300)"),  # noqa: UP045
    instance: Optional[str] = typer.Option(  # noqa: UP045
        None, "--instance", help="instance id (default: coordinator-host-pid-random)"
    ),
    metrics_port: Optional[int] = typer.Option(  # noqa: UP045
        None, "--metrics-port", help="port of /metrics and /status (0: any free)"
    ),
    insecure: bool = typer.Option(
        False, "--insecure", help="listen on a non-loopback address without an API token"
    ),
) -> None:
    """Run one coordinator instance (leader or standby) with its REST API."""
    require("coordinator", "the coordinator")
    from crossfeed.services.coordinator.main import run

    config = settings()
    try:
        code = run(config, instance, host, port, metrics_port, insecure)
    except (OSError, RuntimeError) as err:
        fail(str(err))
    raise typer.Exit(code)


# -- formatting ---------------------------------------------------------------------------


def _state(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'white')}]{state}[/]"


def excluding(exclude: list[str]) -> str:
    return f" (excluding {', '.join(exclude)})" if exclude else ""


def _ms(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def _ts(us: int) -> str:
    if not us:
        return "-"
    seconds = us / 1e6
    return time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{int(us % 1e6) // 1000:03d}"


def _syncpoint(status: dict[str, Any]) -> str:
    """A database sink's newest syncpoint: source consistency_ts = target time."""
    return (
        f"source {_ts(status['syncpoint_ts_us'])} = target {_ms(status['syncpoint_at_ms'])}"
        f".{status['syncpoint_at_ms'] % 1000:03d}"
    )


def _held_back(status: dict[str, Any]) -> str:
    """Ordered feeds: the source partitions whose resolved_ts stopped, and since when."""
    return ", ".join(
        f"{h['partition']} (no resolved mark since {_ms(h['since_ms'])})"
        for h in status["held_back_by"]
    )


def _idle(status: dict[str, Any]) -> str:
    """Ordered feeds whose source went quiet: nothing waits, the target holds it all."""
    return f"idle since {_ts(status['idle_since_us'])} (no change waits)"


def _lag(lag_s: float | None) -> str:
    return "-" if lag_s is None else f"{lag_s:.1f}s"


def _owners(status: dict[str, Any]) -> str:
    """``8: puller-1 x3, puller-2 x3, puller-3 x2`` (and how many have no owner)."""
    tasks = status["tasks"]
    owners = Counter(t["owner"] for t in tasks if t["owner"])
    parts = [f"{owner} x{count}" for owner, count in sorted(owners.items())]
    idle = sum(1 for t in tasks if not t["owner"])
    if idle:
        parts.append(f"{idle} unassigned")
    return f"{len(tasks)}: " + ", ".join(parts)
