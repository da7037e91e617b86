"""Tables for ``crossfeed groups translate``, ``failover`` and ``failback`` (REST JSON in)."""

from __future__ import annotations

import time
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


def deleted_lines(group: Mapping[str, Any]) -> Iterator[Text]:
    """One line per partition whose position is in records the source deleted before
    they were copied: what the group lost, and where it resumes or that it waits."""
    for row in group["partitions"]:
        deleted = row.get("deleted")
        if deleted:
            yield Text(deleted["line"], style="red")


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
    yield _positions_line(report["groups"], report["source"])
    yield from _groups(
        report["groups"], report["moved"], report["active"], report["target"], report["source"]
    )
    for note in report["notes"]:
        yield Text(f"note: {note}", style="dim")
    yield Text(failover_outcome(report), style="bold")


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
    where = report["old_primary"]
    yield from _groups(
        report["groups"], report["moved"], report["active"], where, report["standby"]
    )
    for note in report["notes"]:
        yield Text(f"note: {note}", style="dim")
    yield Text(failback_outcome(report), style="bold")


def _groups(
    groups: list[Mapping[str, Any]],
    moved: Mapping[str, int],
    active: list[str],
    where: str,
    source: str,
) -> Iterator[RenderableType]:
    for group in groups:
        yield group_table(group)
        yield from deleted_lines(group)
        text, style = group_verdict(group, moved, active, where, source)
        yield Text(text, style=style)


def _stale(group: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The positions of a group that may be older than its last commit."""
    return [
        p["position"]
        for p in group["partitions"]
        if p.get("position") is not None and not p["position"]["last_commit"]
    ]


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def _reread_clause(group: Mapping[str, Any], source: str) -> str:
    """What a group may read again, where it applies: only partitions whose last commit
    is not known to be the last (commits made after the last one seen were lost with the
    source), and then only if the group did commit after it."""
    stale = _stale(group)
    if not stale:
        return (
            "resumes at its last commit"
            if any(p.get("position") for p in group["partitions"])
            else ""
        )
    bounds = [p["reread_max"] for p in stale]
    bound = "?" if any(b < 0 for b in bounds) else str(sum(bounds))
    until = min(p["known_until_ms"] for p in stale)
    if bound == "0":
        return "resumes at its last known commit, with nothing after it to read again"
    return (
        f"its commits are known until {_clock(until)}: if it committed after that on "
        f"{source}, it reads at most {bound} record(s) again"
    )


def group_verdict(
    group: Mapping[str, Any],
    moved: Mapping[str, int],
    active: list[str],
    where: str,
    source: str | None = None,
) -> tuple[str, str]:
    """One line per group saying what happened to it, consistent with its rows: moved,
    already at the offsets its rows give, left alone (members, filters), or not moved
    because some rows are not exact. (text, style)"""
    name, rows = group["group"], group["partitions"]
    held = sum(1 for r in rows if (r.get("deleted") or {}).get("held"))
    inexact = sum(1 for r in rows if not r["exact"]) - held
    if name in active:
        return f"group {name}: members active on {where}: left alone", "yellow"
    if not group["translated"]:
        return f"group {name}: excluded by the feed's translate.* filters: not moved", "dim"
    if not rows:
        return f"group {name}: no committed offsets on the feed's topics: nothing to move", ""
    waits = f"; {held} partition(s) not moved until acknowledged (above)" if held else ""
    if name in moved:
        text = (
            f"group {name}: moved to {where}, {moved[name]} partition(s) at the offsets "
            f"above{waits}"
        )
        style = "yellow" if held else "green"
    elif inexact:
        text = (
            f"group {name}: not moved: {inexact} partition(s) without an exact offset on "
            f"{where} (EXACT above)"
        )
        return text + waits, "yellow"
    elif held and held == len(rows):
        return f"group {name}: not moved: every partition waits for its acknowledgment", "red"
    else:
        text = (
            f"group {name}: already at the offsets above on {where} (moved as it committed){waits}"
        )
        style = "yellow" if held else "green"
    clause = _reread_clause(group, source or "the source")
    return (f"{text}; {clause}" if clause else text), style


def _positions_line(groups: list[Mapping[str, Any]], source: str) -> Text:
    """The failover's re-read summary: a bound only for the positions it applies to."""
    positions = [p["position"] for g in groups for p in g["partitions"] if p.get("position")]
    at_last = sum(1 for p in positions if p["last_commit"])
    stale = [p for g in groups for p in _stale(g)]
    if not stale:
        return Text(
            f"positions: {at_last} group partition(s), each at its last commit: nothing is "
            "read again",
            style="green",
        )
    bounds = [p["reread_max"] for p in stale]
    bound = "?" if any(b < 0 for b in bounds) else str(sum(bounds))
    return Text(
        f"positions: {at_last} group partition(s) at their last commit; {len(stale)} at the "
        f"last commit seen before {source} was lost (a group that committed after it reads "
        f"again at most {bound} record(s) in all: per group below)",
        style="yellow",
    )


def _names(groups: list[str]) -> str:
    return ", ".join(groups) if groups else "none"


def _arrived(report: Mapping[str, Any]) -> list[str]:
    """Groups now on the other side: moved by this call, or already at their offsets
    there (every partition exact, as their verdicts say)."""
    moved, active = report["moved"], report["active"]
    here = [
        g["group"]
        for g in report["groups"]
        if g["group"] not in moved
        and g["group"] not in active
        and g["translated"]
        and g["partitions"]
        and all(r["exact"] for r in g["partitions"])
    ]
    return sorted({*moved, *here})


def failover_outcome(report: Mapping[str, Any]) -> str:
    """The last line: what was moved where, and what to do next."""
    target, active = report["target"], report["active"]
    on_target = _arrived(report)
    line = (
        f"failover of {report['feed']} done: {report['source']} -> {target} stopped; "
        f"group(s) {_names(on_target)} resume on {target}"
    )
    if active:
        line += f"; {_names(sorted(active))} left alone (members on {target})"
    return line + f": start their consumers against {target}"


def failback_outcome(report: Mapping[str, Any]) -> str:
    """The last line: what was moved back where, the feeds' states, what to start."""
    primary, standby, feed = report["old_primary"], report["standby"], report["feed"]
    reverse = report["reverse"]
    moved = _arrived(report)
    if report.get("complete"):
        line = (
            f"failback of {feed} done: group(s) {_names(moved)} back on {primary}; "
            f"{feed} replicates {primary} -> {standby} again ({report['forward_state']})"
        )
        if reverse.get("removed"):
            return line + f"; reverse feed {reverse['name']} removed, its copy done"
        return line + f"; reverse feed {reverse['name']} keeps copying {standby} -> {primary}"
    todo = []
    if reverse["action"] == "start-it" or reverse.get("unassigned_tasks"):
        todo.append(f"crossfeed puller run --feed {reverse['name']}")
    todo.append(f"crossfeed failback --feed {feed}")
    waiting = [*report.get("waiting", []), *report["active"]]
    return (
        f"failback of {feed} not finished: group(s) {_names(moved)} back on {primary}, "
        f"{_names(sorted(set(waiting)))} still on {standby}"
        + ("" if reverse["caught_up"] else f", reverse feed {reverse['name']} catching up")
        + f"; {feed} stays failed_over; next: "
        + " then ".join(f"'{t}'" for t in todo)
    )
