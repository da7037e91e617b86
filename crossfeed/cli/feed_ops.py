"""``crossfeed changefeed update|restart`` and ``crossfeed capture list`` (REST only).

``update NAME`` changes a feed in place with ``PUT /v1/changefeeds/NAME``, which creates
it when it does not exist, so the command is idempotent like Kafka Connect's
``PUT /connectors/NAME/config``. Without ``--feed-file`` it reads the feed first and
changes only what is given: ``--topics``/``--exclude`` replace the lists, ``--config``
options are merged into the feed's. ``restart NAME [--task N]`` revokes the feed's tasks
(or one); each is assigned again once its puller let go and starts over from its
committed position on the target. ``ack-gap NAME GAP...`` acknowledges gaps (source
records deleted before they were copied, crossfeed/core/gaps.py) by adding them to the
feed's ``gap.acknowledged`` option: a partition waiting on one (``gap.policy=stop``) goes
on from the source's log start, and the status no longer reports it.
"""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich import box
from rich.table import Table

from crossfeed.cli import admin
from crossfeed.cli.common import fail
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.core import gaps

capture = typer.Typer(help="Live crossfeed instances (TiCDC calls them captures).")

FEED_FIELDS = ("source", "mode", "topics", "exclude", "start")
"""Fields a feed's GET answer and its request body name alike (sink_uri,
rename_format and config are converted)."""


def update_body(
    current: dict[str, Any], given: dict[str, Any], options: dict[str, str]
) -> dict[str, Any]:
    """The PUT body: the feed as stored (``FeedInfo``), what was given laid over it."""
    body = {key: current[key] for key in FEED_FIELDS}
    body |= {
        "name": current["name"],
        "sink-uri": current["sink_uri"],
        "rename-format": current["rename_format"],
        "config": {**current["config"], **options},
    }
    return body | given


@admin.changefeed.command("update")
@admin.api_errors
def update(
    name: str = typer.Argument(..., help="feed name"),
    topics: list[str] = admin.TopicsOpt,
    exclude: list[str] = admin.ExcludeOpt,
    rename_format: Optional[str] = admin.RenameOpt,  # noqa: UP045
    config: list[str] = admin.ConfigOpt,
    source: Optional[str] = admin.SourceOpt,  # noqa: UP045
    sink_uri: Optional[str] = admin.SinkUriOpt,  # noqa: UP045
    feed_file: Optional[str] = admin.FeedFileOpt,  # noqa: UP045
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Change a changefeed's topics, excludes, rename format or options (or create it)."""
    with admin.client(server) as api:
        if feed_file:
            body = admin.feed_file_body(feed_file, name)
        else:
            given = admin.fields_given(
                {
                    "topics": topics,
                    "exclude": exclude,
                    "rename-format": rename_format,
                    "source": source,
                    "sink-uri": sink_uri,
                }
            )
            options = admin.parse_options(config)
            current = _current(api, name)
            if current is None:  # a new feed: the fields given alone
                body = {"name": name, "topics": [], **given}
                if options:
                    body["config"] = options
            else:
                body = update_body(current, given, options)
        feed = api.put_feed(body)
    admin.console().print(
        f"changefeed [bold]{feed['name']}[/]: {feed['source']} -> {feed['sink_uri']}, "
        f"topics {', '.join(feed['topics'])}{admin.excluding(feed['exclude'])}; "
        f"state {feed['state']} (running tasks take a change when restarted: "
        f"'crossfeed changefeed restart {feed['name']}')"
    )


def _current(api: CoordinatorClient, name: str) -> dict[str, Any] | None:
    try:
        detail: dict[str, Any] = api.get_feed(name)
    except ApiError as err:
        if err.error_code == "feed_not_found":
            return None
        raise
    return dict(detail["feed"])


@admin.changefeed.command("ack-gap")
@admin.api_errors
def ack_gap(
    name: str = typer.Argument(..., help="feed name"),
    keys: list[str] = typer.Argument(
        ..., help="gaps as the status reports them: topic/partition@offset"
    ),
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Acknowledge gaps: records deleted at the source before they were copied."""
    try:
        for key in keys:
            gaps.parse_key(key)
    except ValueError as err:
        fail(str(err))
    with admin.client(server) as api:
        current = _current(api, name)
        if current is None:
            fail(f"no changefeed named {name!r}")
        known = current["config"].get("gap.acknowledged")
        value = gaps.acknowledge(known, keys)
        api.put_feed(update_body(current, {}, {"gap.acknowledged": value}))
    admin.console().print(
        f"changefeed [bold]{name}[/]: acknowledged {', '.join(keys)}; a partition waiting on "
        "one goes on from the source's log start"
    )


@admin.changefeed.command("restart")
@admin.api_errors
def restart(
    name: str = typer.Argument(..., help="feed name"),
    task: Optional[int] = typer.Option(  # noqa: UP045
        None, "--task", help="restart only this task (0 to staging.partitions - 1)"
    ),
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Restart a running changefeed's tasks (or one) from their committed positions."""
    if task is not None and task < 0:
        fail(f"--task takes a task number from 0, got {task}")
    with admin.client(server) as api:
        result = api.restart_feed(name, task)
    admin.console().print(
        f"restarting {len(result['tasks'])} task(s): {', '.join(result['tasks'])}"
    )


@capture.command("list")
@admin.api_errors
def capture_list(
    as_json: bool = admin.JsonOpt,
    server: Optional[str] = admin.ServerOpt,  # noqa: UP045
) -> None:
    """Live instances: role, feeds, tasks, address, version, last heartbeat."""
    with admin.client(server) as api:
        captures = api.captures()
    if admin.printed_raw(captures, as_json, "no live instances"):
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("INSTANCE", "ROLE", "STATE", "FEEDS", "TASKS", "ADDRESS", "VERSION", "HEARD"):
        table.add_column(column)
    for c in captures:
        table.add_row(
            c["instance_id"],
            c["role"],
            c["state"],
            ", ".join(c["feeds"]) or "-",
            ", ".join(c["tasks"]) or "-",
            c["address"] or "-",
            c["version"],
            f"{c['heartbeat_age_ms'] / 1000:.1f}s ago",
        )
    admin.console().print(table)
    errors = [c for c in captures if c["last_error"]]
    for c in errors:
        admin.console().print(f"[red]{c['instance_id']}[/]: {c['last_error']}")
