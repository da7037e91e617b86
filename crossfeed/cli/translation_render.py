"""Tables for ``crossfeed groups translate``, ``failover`` and ``failback`` (REST JSON in)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

EXACT_METHODS = frozenset({"offset-sync", "header"})


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


def _gap(value: int) -> str:
    return "?" if value < 0 else str(value)


def _exact(row: Mapping[str, Any]) -> Text:
    if row["target_offset"] is None:
        return Text("unknown", style="red")
    if row["exact"]:
        return Text("yes", style="green")
    return Text(f"no ({row['method']})", style="yellow")


def _reread(position: Mapping[str, Any] | None) -> Text:
    """The position RPO of one group partition (failover and failback reports)."""
    if position is None:
        return Text("-")
    bound = position["reread_max"]
    count = "?" if bound < 0 else ("0" if bound == 0 else f"<= {bound}")
    if position["last_commit"]:
        return Text(f"{count} (last commit)", style="green" if bound == 0 else "yellow")
    age = position["commit_age_s"]
    known = "commit time unknown" if age is None else f"last known commit {age:.1f}s old"
    return Text(f"{count} ({known})", style="green" if bound == 0 else "yellow")


def group_table(group: Mapping[str, Any]) -> Table:
    """One group: per partition source offset, destination offset, exactness, gap, and in
    a failover or failback report the records it may read again."""
    table = Table(box=box.SIMPLE_HEAD, title=f"group {group['group']} (feed {group['feed']})")
    rows = group["partitions"]
    renamed = any(
        (r["target_topic"], r["target_partition"]) != (r["topic"], r["partition"]) for r in rows
    )
    columns = [
        "TOPIC",
        "PARTITION",
        "SOURCE OFFSET",
        *(["TARGET"] if renamed else []),
        "TARGET OFFSET",
        "EXACT",
        "GAP",
        *(["RE-READ"] if any(r.get("position") for r in rows) else []),
    ]
    for column in columns:
        table.add_column(
            column, justify="right" if "OFFSET" in column or column == "GAP" else "left"
        )
    for row in rows:
        target = [f"{row['target_topic']}/{row['target_partition']}"] if renamed else []
        table.add_row(
            row["topic"],
            str(row["partition"]),
            str(row["source_offset"]),
            *target,
            _offset(row["target_offset"]),
            _exact(row),
            _gap(row["gap"]),
            *([_reread(row.get("position"))] if "RE-READ" in columns else []),
        )
    return table


def group_summary(group: Mapping[str, Any]) -> str:
    parts = group["partitions"]
    if not parts:
        return f"group {group['group']} has no committed offsets on the feed's topics"
    exact = sum(1 for p in parts if p["exact"])
    line = f"{exact}/{len(parts)} partition(s) exact"
    if not group["source_reachable"]:
        line += "; the source does not answer: offsets as last known"
    if group["active_members"]:
        line += f"; {group['active_members']} member(s) active on the target: not moved"
    if not group["translated"]:
        line += "; excluded by the feed's translate.* filters: never moved"
    return line


def rpo_table(rows: list[Mapping[str, Any]], title: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title)
    for column in ("TOPIC", "PARTITION", "SOURCE END", "REPLICATED TO", "MISSING", "RPO"):
        table.add_column(column, justify="left" if column in ("TOPIC",) else "right")
    for row in rows:
        missing = row["unreplicated"]
        text = "?" if missing < 0 else (str(missing) if row["counted"] else f"<= {missing}")
        seconds = row["rpo_seconds"]
        table.add_row(
            row["topic"],
            str(row["partition"]),
            _offset(row["source_end"]),
            _offset(row["replicated_to"]),
            Text(text, style="red" if missing else "green"),
            "?" if seconds is None else f"{seconds:.1f}s",
        )
    return table


def failover_report(report: Mapping[str, Any]) -> Iterator[RenderableType]:
    yield Text(
        f"feed {report['feed']} failed over: {report['source']} -> {report['target']} "
        f"(stopped by the {report['stopped_by']}; {report.get('fenced_tasks', 0)} puller "
        f"task(s) fenced on {report['target']})",
        style="bold",
    )
    yield rpo_table(report["partitions"], f"records on {report['source']} never replicated")
    total = report["unreplicated_records"]
    seconds = report["rpo_seconds"]
    yield Text(
        f"RPO: {total} record(s)" + ("" if seconds is None else f", {seconds:.1f}s of data"),
        style="red" if total else "green",
    )
    stale, bound = report["positions_stale"], report["reread_max_records"]
    yield Text(
        f"positions: {report['positions_at_last_commit']} group partition(s) at their last "
        f"commit, {stale} possibly older"
        + (f"; at most {bound} record(s) may be read again" if bound else "; nothing re-read"),
        style="yellow" if bound else "green",
    )
    yield from _groups(report["groups"], report["moved"], report["active"])
    for note in report["notes"]:
        yield Text(f"note: {note}", style="dim")


def failback_report(report: Mapping[str, Any]) -> Iterator[RenderableType]:
    yield Text(
        f"feed {report['feed']}: failing back to {report['old_primary']} from {report['standby']}",
        style="bold",
    )
    table = Table(box=box.SIMPLE_HEAD, title=f"extra data on {report['old_primary']}")
    for column in ("TOPIC", "PARTITION", "REPLICATED TO", "END", "EXTRA", "REPLAYED"):
        table.add_column(column, justify="left" if column == "TOPIC" else "right")
    for row in report["extra"]:
        extra = row["extra"]
        table.add_row(
            row["topic"],
            str(row["partition"]),
            str(row["replicated_to"]),
            str(row["end"]),
            "?" if extra < 0 else (str(extra) if row["counted"] else f"<= {extra}"),
            str(row["replayed"]),
        )
    yield table
    yield Text(
        f"{report['extra_records']} extra record(s), {report['replayed_records']} replayed to "
        f"{report['standby']}"
    )
    reverse = report["reverse"]
    state = "caught up" if reverse["caught_up"] else "not caught up yet"
    action = {"created": "created", "existing": "already there", "start-it": "to be started"}
    yield Text(
        f"reverse feed {reverse['name']}: {action[reverse['action']]}, {state}"
        + (", start positions written" if reverse["positions_seeded"] else "")
    )
    yield from _groups(report["groups"], report["moved"], report["active"])
    for note in report["notes"]:
        yield Text(f"note: {note}", style="dim")


def _groups(
    groups: list[Mapping[str, Any]], moved: Mapping[str, int], active: list[str]
) -> Iterator[RenderableType]:
    for group in groups:
        yield group_table(group)
        name = group["group"]
        if name in moved:
            yield Text(f"group {name}: moved ({moved[name]} partition(s))", style="green")
        elif name in active:
            yield Text(f"group {name}: active on the target, left alone", style="yellow")
        else:
            yield Text(f"group {name}: already there or nothing exact to move")
