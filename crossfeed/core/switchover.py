"""The decisions of a planned switchover of a database feed (docs/disaster-recovery.md):
no I/O here.

A switchover of feed F (source database S captured by Debezium, target database T) makes
T the primary with nothing lost: S is frozen (read-only, its writing sessions ended), F
drains until T holds every transaction S committed, the captured tables are compared by
digest, and a reverse feed captures T from that point (a replication slot made while
nothing writes to T, so no snapshot is needed) and applies it to S.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_GENERATION = re.compile(r"^(?P<base>.+)-r(?P<n>[0-9]+)$")
NAME_LIMIT = 63  # a feed name's length (crossfeed/feeds.py FEED_NAME_RE)


def reverse_name(feed: str) -> str:
    """The reverse feed's name: ``bank`` -> ``bank-r1`` -> ``bank-r2`` ... Each switchover
    makes a new feed (its own topics, slot and position rows), so names never repeat."""
    found = _GENERATION.match(feed)
    base, n = (found["base"], int(found["n"])) if found else (feed, 0)
    name = f"{base}-r{n + 1}"
    if len(name) > NAME_LIMIT:
        raise ValueError(
            f"the reverse feed's name {name!r} is longer than {NAME_LIMIT} characters: "
            "give one (--reverse-name)"
        )
    return name


@dataclass(frozen=True, slots=True)
class Digest:
    """A table's rows, counted and hashed in key order over the columns both sides have
    (crossfeed's hidden columns left out)."""

    rows: int
    md5: str


def differing(source: Mapping[str, Digest], target: Mapping[str, Digest]) -> list[str]:
    """The tables whose digests differ (or that one side lacks), sorted."""
    return sorted(t for t in set(source) | set(target) if source.get(t) != target.get(t))


def drained(consistency_ts_us: int, frozen_at_us: int) -> bool:
    """Has the target applied everything the source committed before its freeze? The
    target holds the source's state as of consistency_ts; the freeze ended every writing
    session at ``frozen_at_us`` (the source's clock), so nothing commits after it."""
    return consistency_ts_us >= frozen_at_us


def comparable_columns(
    source: list[str], target: list[str], hidden: frozenset[str]
) -> list[str] | None:
    """The columns a digest covers: the source's, in its order, none of them hidden; None
    when the target lacks one (the tables cannot be equal)."""
    columns = [c for c in source if c not in hidden]
    return columns if set(columns) <= set(target) else None
