"""Is a cluster answering? From librdkafka's statistics, which a client emits each second.

A client keeps retrying a cluster that is down without a word to its application: reads
simply return nothing. An instance that must say why it makes no progress (its heartbeat's
``last_error``, the feed's status) asks a :class:`Reachability` fed by its client's
statistics callback instead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from crossfeed.kafka import clients
from crossfeed.kafka.diagnose import diagnose

# Not under "crossfeed.kafka", which holds librdkafka's own chatter and is silenced: these
# lines are for the operator.
log = logging.getLogger("crossfeed.reachability")

STATS_INTERVAL_MS: Final = 1000
DOWN_AFTER_S: Final = 5.0
"""No broker connection up for this long (several statistics missed): down."""


class Reachability:
    """Tracks whether a client of one cluster has a broker connection up."""

    def __init__(self, role: str, alias: str, conf: dict[str, Any]) -> None:
        self.role = role  # "source", "target": how the instance names the cluster
        self.alias = alias
        self.servers = conf.get("bootstrap.servers", "")
        self.seen_up = time.monotonic()
        self.down_since: str | None = None  # wall clock, for a message that stays the same
        # Statistics arrive only while the client is polled: a client not polled for a
        # while (its thread busy starting a task on a brand-new cluster) says nothing
        # about the cluster. Its owner calls polled() after each poll; the cluster counts
        # as lost only after DOWN_AFTER_S of steady polling without a broker up.
        self.last_poll = 0.0
        self.polling_since = time.monotonic()

    def client_conf(self) -> dict[str, Any]:
        """Properties that make a client report to this tracker (served by its poll)."""
        return {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": self.on_stats}

    def on_stats(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        if any(b.get("state") == "UP" for b in stats.get("brokers", {}).values()):
            self.seen_up = time.monotonic()
            self.down_since = None

    def polled(self) -> None:
        now = time.monotonic()
        if now - self.last_poll > 1.0:  # a gap: the statistics start over
            self.polling_since = now
        self.last_poll = now

    def up(self, within_s: float = DOWN_AFTER_S) -> bool:
        """A broker connection was up within ``within_s`` (False while not polled)."""
        return time.monotonic() - self.seen_up < within_s

    def problem(self) -> str | None:
        """Why the cluster counts as lost, or None while it answers (or is not polled)."""
        now = time.monotonic()
        watched = now - self.last_poll <= 1.0 and now - self.polling_since >= DOWN_AFTER_S
        if self.up() or not watched:
            return None
        if self.down_since is None:
            last_up = time.time() - (time.monotonic() - self.seen_up)
            self.down_since = time.strftime("%H:%M:%S", time.localtime(last_up))
        return (
            f"{self.role} cluster {self.alias} ({self.servers}) unreachable since "
            f"{self.down_since}: no broker connection"
        )


def wait_for_cluster(
    alias: str,
    conf: dict[str, Any],
    stop: threading.Event,
    on_problem: Callable[[str | None], None] | None = None,
) -> str:
    """The cluster.id, waiting while the cluster does not answer. Each attempt that fails
    logs why: a security misconfiguration (wrong password, unknown CA, plaintext against a
    TLS listener, ...) as one ERROR line naming the cluster, its listener and the likely
    fix (:mod:`crossfeed.kafka.diagnose`), else that it does not answer. ``on_problem``
    gets that line (None once the cluster answers), for the instance's ``/status``."""
    delay = 1.0
    while not stop.is_set():
        cluster_id, texts = clients.probe(conf)
        if cluster_id:
            if on_problem is not None:
                on_problem(None)
            return cluster_id
        line = diagnose(alias, conf, texts)
        if line is None:
            line = f"cluster {alias} ({conf.get('bootstrap.servers')}) does not answer"
            log.warning("%s; retrying in %.0fs", line, delay)
        else:
            log.error("%s; retrying in %.0fs", line, delay)
        if on_problem is not None:
            on_problem(line)
        stop.wait(delay)
        delay = min(delay * 2, 30.0)
    raise InterruptedError
