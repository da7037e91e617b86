"""One PostgreSQL sink instance applies a feed at a time: the one holding the feed's
advisory lock (sink.py)."""

from __future__ import annotations

from typing import Any

import psycopg


def take(conn: psycopg.Connection[Any], feed: str) -> bool:
    """Whether this session now holds ``feed``'s lock. A session lock: it stays through
    commits and rollbacks, and goes with the connection (a dead instance's is released
    when its connection closes)."""
    got = conn.execute(
        "SELECT pg_try_advisory_lock(hashtext('crossfeed-sink'), hashtext(%s))",
        (feed,),
    ).fetchone()
    conn.commit()
    return bool(got and got[0])
