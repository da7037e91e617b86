"""``crossfeed pair create|status|remove``: two PostgreSQL databases, both taking writes,
joined through crossfeed (docs/active-active.md). The coordinator does the work
(``/v1/pairs``, crossfeed/pair/ops.py); the defaults are the local stack's (``crossfeed
local up --active-active``): side A is postgres-a on dc-a with Connect on 18083, side B
the target PostgreSQL on dc-b with Connect on 28083.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Optional, TypeVar
from urllib.parse import quote, urlencode

import typer
from rich.markup import escape

from crossfeed.cli.admin import ServerOpt, console
from crossfeed.cli.admin import _lag as lag
from crossfeed.cli.admin import _ts as ts
from crossfeed.cli.common import clean_errors, err_console, fail, settings
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.local.connect import REST_PORT, REST_PORT_B
from crossfeed.local.postgres import SOURCE_URI
from crossfeed.local.postgres import URI as TARGET_URI

app = typer.Typer(
    help="Active-active: two PostgreSQL databases, both taking writes, last writer wins "
    "(docs/active-active.md).",
    no_args_is_help=True,
)

PAIR_TIMEOUT_S = 180.0
"""A pair's request waits for DDL on both databases and both Connect clusters."""

ConnectAOpt = typer.Option(
    f"http://127.0.0.1:{REST_PORT}",
    "--connect-a",
    help="Kafka Connect REST URL writing to side A's cluster (default: the local stack's)",
)
ConnectBOpt = typer.Option(
    f"http://127.0.0.1:{REST_PORT_B}",
    "--connect-b",
    help="Kafka Connect REST URL writing to side B's cluster (default: the local stack's, "
    "crossfeed local up --active-active)",
)
JsonOpt = typer.Option(False, "--json", help="print the server's JSON")
F = TypeVar("F", bound=Callable[..., Any])


def refusals(func: F) -> F:
    """A refusal is one line per reason, each printed as an error line (exit 1)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ApiError as err:
            lines = err.message.splitlines() or [err.message]
            for line in lines[:-1]:
                err_console.print(f"[bold red]error:[/] {escape(line)}", soft_wrap=True)
            fail(lines[-1])

    return clean_errors(wrapper)  # type: ignore[return-value]


def create_body(
    name: str,
    a_database: str,
    b_database: str,
    tables: list[str],
    all_tables: bool,
    schema: str,
    counters: list[str],
    allow_unsafe: bool,
    a_cluster: str,
    b_cluster: str,
    connect_a: str,
    connect_b: str,
    snapshot: str,
) -> dict[str, Any]:
    """The body of ``POST /v1/pairs``; a one-line error (exit 1) for what the server would
    refuse anyway without looking at a database."""
    if all_tables == bool(tables):
        fail("name the tables: --table schema.table (repeatable) or --all-tables")
    if snapshot not in ("initial", "no_data"):
        fail(f"--snapshot takes initial or no_data, not {snapshot!r}")
    return {
        "name": name,
        "a_database": a_database,
        "b_database": b_database,
        "tables": tables,
        "all_tables": all_tables,
        "schema": schema,
        "counters": counters,
        "allow_unsafe": allow_unsafe,
        "a_cluster": a_cluster,
        "b_cluster": b_cluster,
        "connect_a": connect_a,
        "connect_b": connect_b,
        "snapshot": snapshot,
    }


def pair_path(name: str, connect_a: str, connect_b: str, **more: str) -> str:
    query = urlencode({"connect_a": connect_a, "connect_b": connect_b, **more})
    return f"/v1/pairs/{quote(name, safe='')}?{query}"


def _ask(server: str | None, method: str, path: str, body: Any, as_json: bool) -> Any:
    """The coordinator's answer; None when it was printed as JSON (--json)."""
    config = settings()
    with CoordinatorClient(
        server or config.server,
        config.api_token,
        timeout_s=PAIR_TIMEOUT_S,
        ca_file=config.server_ca_file,
    ) as api:
        answer = api.request(method, path, body)
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
        return None
    return answer


@app.command()
@refusals
def create(
    name: str = typer.Argument(..., help="the pair: feeds NAME-a-to-b and NAME-b-to-a"),
    a_database: str = typer.Option(
        SOURCE_URI, "--a-database", help="side A: postgresql://USER[:PASSWORD]@HOST:PORT/DB"
    ),
    b_database: str = typer.Option(
        TARGET_URI, "--b-database", help="side B: postgresql://USER[:PASSWORD]@HOST:PORT/DB"
    ),
    tables: list[str] = typer.Option(
        [], "--table", help="schema.table to replicate both ways (repeatable; one schema)"
    ),
    all_tables: bool = typer.Option(
        False, "--all-tables", help="every table of --schema (on either side)"
    ),
    schema: str = typer.Option("public", "--schema", help="with --all-tables, or bare --table"),
    counters: list[str] = typer.Option(
        [],
        "--counter",
        help="table.column whose changes are added up, not overwritten (a balance, a stock "
        "level); repeatable",
    ),
    allow_unsafe: bool = typer.Option(
        False,
        "--allow-unsafe",
        help="go on past unique indexes besides the key and keys generated on both sides "
        "(listed as warnings in 'pair status')",
    ),
    a_cluster: str = typer.Option("dc-a", "--a-cluster", help="side A's cluster alias"),
    b_cluster: str = typer.Option("dc-b", "--b-cluster", help="side B's cluster alias"),
    connect_a: str = ConnectAOpt,
    connect_b: str = ConnectBOpt,
    snapshot: str = typer.Option(
        "initial",
        "--snapshot",
        help="initial: each side's existing rows are sent to the other first; no_data: only "
        "changes from now on (the databases already hold the same rows)",
    ),
    as_json: bool = JsonOpt,
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """Join two databases both ways (checks, hidden columns, two connectors, two feeds).

    Checks both databases and refuses what would diverge (one line each, with its fix),
    adds the pair's hidden columns and triggers to both, registers a Debezium connector
    on each side and creates both ordered feeds through the coordinator."""
    body = create_body(
        name,
        a_database,
        b_database,
        tables,
        all_tables,
        schema,
        counters,
        allow_unsafe,
        a_cluster,
        b_cluster,
        connect_a,
        connect_b,
        snapshot,
    )
    answer = _ask(server, "POST", "/v1/pairs", body, as_json)
    if answer is None:
        return
    out = console()
    for line in answer["done"]:
        out.print(line, soft_wrap=True)
    feeds = " and ".join(answer["feeds"])
    out.print(
        f"pair {answer['pair']}: feeds {feeds}; run a puller, a sorter and a sink for each "
        f"(crossfeed puller run --feed {answer['feeds'][0]}, ...)",
        soft_wrap=True,
    )


@app.command()
@refusals
def status(
    name: str = typer.Argument(..., help="the pair"),
    connect_a: str = ConnectAOpt,
    connect_b: str = ConnectBOpt,
    as_json: bool = JsonOpt,
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """Both directions (state, consistency_ts, lag), connectors, schema findings."""
    answer = _ask(server, "GET", pair_path(name, connect_a, connect_b), None, as_json)
    if answer is None:
        return
    out = console()
    out.print(f"pair {answer['pair']}: {', '.join(answer['tables'])}", soft_wrap=True)
    if answer["counters"]:
        out.print(f"counters: {', '.join(answer['counters'])}")
    for d in answer["directions"]:
        if d["state"] == "missing":
            out.print(f"{d['feed']}: [red]missing[/]")
            continue
        out.print(
            f"{d['feed']}: {d['state']}, consistency_ts {ts(d['consistency_ts_us'] or 0)}, "
            f"lag {lag(d['lag_s'])}" + (f"; [red]{d['last_error']}[/]" if d["last_error"] else "")
        )
    for c in answer["connectors"]:
        tasks = ", ".join(c.get("tasks", [])) or "no task"
        extra = f" ({c['error']})" if c.get("error") else f"; {tasks}"
        out.print(f"connector {c['connector']} ({c['side']}): {c['state']}{extra}", soft_wrap=True)
    if answer["findings"]:
        out.print(f"[yellow]findings ({len(answer['findings'])}):[/]")
        for line in answer["findings"]:
            out.print(f"  {line}", soft_wrap=True, markup=False)
    else:
        out.print("findings: none (both schemas are safe for active-active)")


@app.command()
@refusals
def remove(
    name: str = typer.Argument(..., help="the pair"),
    connect_a: str = ConnectAOpt,
    connect_b: str = ConnectBOpt,
    drop_hidden: bool = typer.Option(
        False,
        "--drop-hidden",
        help="also drop the hidden columns (_crossfeed_ts, _crossfeed_side) and triggers "
        "from the pair's tables on both sides",
    ),
    as_json: bool = JsonOpt,
    server: Optional[str] = ServerOpt,  # noqa: UP045
) -> None:
    """Remove both feeds and both connectors; say what stays behind and how to drop it."""
    extra = {"drop_hidden": "true"} if drop_hidden else {}
    path = pair_path(name, connect_a, connect_b, **extra)
    answer = _ask(server, "DELETE", path, None, as_json)
    if answer is None:
        return
    out = console()
    for line in answer["removed"]:
        out.print(f"removed {line}", soft_wrap=True, markup=False)
    if answer["left_behind"]:
        out.print("left behind:")
        for line in answer["left_behind"]:
            out.print(f"  {line}", soft_wrap=True, markup=False)
