"""What the failover router needs from the coordinator it is mounted in.

The lead wires it once (see ``__init__.py``); every field has a default so a test can
mount the router in a bare FastAPI app with just the settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.translation.translator import Translator


def _nothing(_name: str) -> Any:
    return None


@dataclass
class FailoverHooks:
    settings: Settings
    find_feed: Callable[[str], FeedSpec | None] = _nothing
    """A feed stored in the coordinator (None: not one of its feeds — a feed-file feed,
    whose spec the request must carry)."""
    mark_failed_over: Callable[[str], None] | None = None
    """Set a stored feed's status to failed_over (its tasks stop)."""
    create_feed: Callable[[FeedSpec], None] | None = None
    """Store and start a new feed (failback's reverse feed)."""
    mark_failed_back: Callable[[str], None] | None = None
    """Set a failed-over feed back to normal (a completed failback: its tasks start)."""
    remove_feed: Callable[[str], None] | None = None
    """Remove a stored feed (a completed failback's reverse feed, its work done)."""
    unassigned_tasks: Callable[[str], int] = lambda _name: 0
    """How many tasks of a stored feed no live puller runs (the reverse feed's)."""
    translator: Callable[[str], Translator | None] = _nothing
    """The leader's running translator of a feed, shared (translate requests)."""
    take_translator: Callable[[str], Translator | None] = _nothing
    """Stop ticking a feed's translator and hand it over, memory and all (failover)."""
    leader_only: Callable[[Request], Response | None] | None = None
    """None on the leader; else a 503 for mutating requests (a standby forwards them to
    the leader before they reach a route: ``forward.py``)."""
    dependencies: Sequence[Any] = ()
    """FastAPI dependencies of the mutating routes (the bearer-token check)."""
