"""``crossfeed groups translate``, ``failover`` and ``failback``: REST calls and output.

Like every admin command they talk to the coordinator's REST API only (docs/design.md, Interfaces):
``--server``, else ``$CROSSFEED_SERVER``, else ``server`` from the settings. A feed run
from a feed file (not stored in the coordinator) is sent along with ``--feed-file``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import typer
import yaml
from rich.console import RenderableType

from crossfeed.cli.admin import console
from crossfeed.cli.common import fail, settings
from crossfeed.cli.takeover_render import is_ordered, ordered_failover_report
from crossfeed.cli.translation_render import (
    deleted_lines,
    failback_report,
    failover_report,
    group_summary,
    group_table,
)
from crossfeed.client.rest import CoordinatorClient
from crossfeed.feeds import load_feed_file

TIMEOUT_S = 900.0
"""Failover waits for sinks to drain and failback may copy data: minutes, not seconds."""


def call(server: str | None, method: str, path: str, body: Any = None) -> Any:
    config = settings()
    with CoordinatorClient(
        server or config.server,
        config.api_token,
        timeout_s=TIMEOUT_S,
        ca_file=config.server_ca_file,
    ) as api:
        return api.request(method, path, body)


def feed_ref(feed: str, feed_file: str | None) -> dict[str, Any]:
    """The request's feed: its name, plus its fields when it runs from a feed file."""
    if feed_file is None:
        return {"feed": feed}
    spec = load_feed_file(feed_file)
    if spec.name != feed:
        fail(f"--feed {feed!r} does not match the name {spec.name!r} in {feed_file}")
    data = spec.model_dump(by_alias=True, exclude_unset=True)
    data["config"] = spec.config.model_dump(by_alias=True, exclude_unset=True)
    return {"feed": feed, "feed_spec": data}


def show(data: Any, as_json: bool, render: Callable[[Any], Iterable[RenderableType]]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    out = console()
    for part in render(data):
        out.print(part)


def translate(
    feed: str, group: str, feed_file: str | None, as_json: bool, server: str | None
) -> None:
    path = f"/v1/groups/{quote(group, safe='')}/translate"
    if feed_file is None:
        result = call(server, "GET", f"{path}?feed={quote(feed, safe='')}")
    else:
        result = call(server, "POST", path, feed_ref(feed, feed_file))
    show(
        result,
        as_json,
        lambda data: [group_table(data), *deleted_lines(data), group_summary(data)],
    )


def failover(feed: str, feed_file: str | None, as_json: bool, server: str | None) -> None:
    body = feed_ref(feed, feed_file)
    report = call(server, "POST", "/v1/failover", body)
    show(report, as_json, ordered_failover_report if is_ordered(report) else failover_report)


def failback(
    feed: str,
    feed_file: str | None,
    *,
    replay_extra: bool,
    reverse_feed: str | None,
    reverse_feed_file: str | None,
    reverse_start: str,
    keep_reverse: bool = False,
    wait_s: float,
    as_json: bool,
    server: str | None,
) -> None:
    if reverse_start not in ("frontier", "earliest"):
        fail(f"--reverse-start must be frontier or earliest, not {reverse_start!r}")
    body = {
        **feed_ref(feed, feed_file),
        "replay_extra": replay_extra,
        "reverse_feed": reverse_feed,
        "reverse_start": reverse_start,
        "keep_reverse": keep_reverse,
        "wait_s": wait_s,
    }
    report = call(server, "POST", "/v1/failback", body)
    if reverse_feed_file:
        with open(reverse_feed_file, "w") as out:
            yaml.safe_dump(report["reverse"]["spec"], out, sort_keys=False)
    show(report, as_json, failback_report)
    if reverse_feed_file and not as_json:
        name = report["reverse"]["name"]
        typer.echo(
            f"wrote {reverse_feed_file}; start the reverse feed with: crossfeed puller run "
            f"--feed {name} --feed-file {reverse_feed_file}"
        )
