"""``crossfeed switchover`` and ``crossfeed failback --source-database``: the change of
direction of a database feed (docs/disaster-recovery.md). The coordinator does the work
(``/v1/switchover``, ``/v1/failback/database``); the defaults are the local stack's: the
source is postgres-a with Connect on 18083 (dc-a), the target side's Connect is on 28083
(``crossfeed local up --active-active``). A feed whose source is dc-b (a reverse feed)
takes the other side's defaults.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from rich.console import RenderableType
from rich.text import Text

from crossfeed.cli.takeover_render import ts_text
from crossfeed.cli.translation import call, show
from crossfeed.client.rest import ApiError
from crossfeed.local.connect import REST_PORT, REST_PORT_B
from crossfeed.local.postgres import SOURCE_URI
from crossfeed.local.postgres import URI as TARGET_URI

LOCAL_A = (SOURCE_URI, f"http://127.0.0.1:{REST_PORT}", f"http://127.0.0.1:{REST_PORT_B}")
LOCAL_B = (TARGET_URI, f"http://127.0.0.1:{REST_PORT_B}", f"http://127.0.0.1:{REST_PORT}")


def sides(
    feed_source: str,
    source_database: str | None,
    source_connect: str | None,
    reverse_connect: str | None,
) -> dict[str, str]:
    """The request's places: as given, else the local stack's for the feed's side."""
    local = LOCAL_B if feed_source == "dc-b" else LOCAL_A
    return {
        "source_database": source_database or local[0],
        "source_connect": source_connect or local[1],
        "reverse_connect": reverse_connect or local[2],
    }


def _stored(server: str | None, feed: str) -> dict[str, Any]:
    """The feed as the coordinator stores it; {} when it cannot say (the request that
    follows says why)."""
    try:
        found = call(server, "GET", f"/v1/changefeeds/{quote(feed, safe='')}")
    except ApiError:
        return {}
    inner = found.get("feed", found) if isinstance(found, dict) else {}
    return inner if isinstance(inner, dict) else {}


def feed_source(server: str | None, feed: str) -> str:
    """The feed's source cluster alias ('' when unknown)."""
    return str(_stored(server, feed).get("source", ""))


def is_database_feed(server: str | None, feed: str) -> bool:
    """An ordered feed into PostgreSQL (its failback is the database's)."""
    stored = _stored(server, feed)
    return stored.get("mode") == "ordered" and str(stored.get("sink_uri", "")).startswith(
        "postgres"
    )


def switchover(
    feed: str, places: dict[str, str], options: dict[str, Any], as_json: bool, server: str | None
) -> None:
    report = call(server, "POST", "/v1/switchover", {"feed": feed, **places, **options})
    show(report, as_json, switchover_report)


def failback(
    feed: str, places: dict[str, str], options: dict[str, Any], as_json: bool, server: str | None
) -> None:
    report = call(server, "POST", "/v1/failback/database", {"feed": feed, **places, **options})
    show(report, as_json, failback_report)


def switchover_report(report: Mapping[str, Any]) -> Iterator[RenderableType]:
    yield Text(
        f"switched over: {report['target']} is the primary; {report['source']} is read-only "
        f"and follows it through {report['reverse_feed']}",
        style="bold",
    )
    yield Text(
        f"writes refused for {report['writes_refused_s']:.2f}s (from the freeze until the new "
        f"primary's writes were captured); took {report['took_s']:.2f}s"
    )
    yield Text(
        f"RPO 0, checked: {len(report['tables'])} table(s) equal at consistency_ts "
        f"{ts_text(report['consistency_ts_us'])} (last source transaction "
        f"{report['last_txn'] or '-'})",
        style="green",
    )
    for table in report["tables"]:
        yield Text(f"  {table['table']}: {table['rows']} rows, md5 {table['md5']}")
    if report["sequences"]:
        yield Text("sequences carried over: " + ", ".join(report["sequences"]))
    yield Text(f"{report['sessions_ended']} client session(s) of the old primary ended")
    for line in [*report["notes"], *(f"removed {r}" for r in report["removed"])]:
        yield Text(f"note: {line}", style="dim")


def failback_report(report: Mapping[str, Any]) -> Iterator[RenderableType]:
    yield Text(
        f"failed back: feed {report['feed']}'s old primary is equal to the new one again",
        style="bold",
    )
    count = report["divergent_transactions"]
    yield Text(
        f"divergent tail: {count} transaction(s), {report['divergent_changes']} change(s) "
        f"committed after {ts_text(report['consistency_ts_us'])} that never reached the new "
        f"primary; kept in {report['kept_in']}",
        style="yellow" if count else "green",
    )
    for txn in report["divergent"][:20]:
        yield Text(
            f"  xid {txn['xid']} at {ts_text(txn['commit_ts_us'])}: {txn['changes']} change(s) "
            f"in {', '.join(txn['tables'])}"
        )
    if count > 20:
        yield Text(f"  ... and {count - 20} more (--json, or the table)")
    yield Text(
        "re-seeded from the new primary: "
        + ", ".join(f"{r['table']} -{r['deleted']} +{r['written']}" for r in report["reseeded"])
    )
    if report["caught_up_s"] is not None:
        yield Text(f"{report['reverse_feed']} caught up in {report['caught_up_s']:.1f}s")
    back = report.get("switchover")
    if back:
        yield from switchover_report(back)
    else:
        yield Text(
            f"the new primary stays; run crossfeed switchover --feed {report['reverse_feed']} "
            "to return"
        )
    for note in report["notes"]:
        yield Text(f"note: {note}", style="dim")
