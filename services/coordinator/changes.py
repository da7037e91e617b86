"""The changes the REST API asks of the leader: create, update, restart, pause, resume,
remove, fail over or back a feed. Each takes the tick's lock, writes fenced, then has the
leader decide again at once (``lead``), so the change shows in assignments and statuses
without waiting for the next tick."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka.diagnose import diagnose
from crossfeed.services.coordinator import lifecycle, updates
from crossfeed.services.coordinator.decisions import Decisions
from crossfeed.services.coordinator.leadership import Leadership, now_ms
from crossfeed.services.coordinator.lifecycle import NotLeaderNow
from crossfeed.services.coordinator.records import FeedStatus, StoredFeed, feed_key, status_key
from crossfeed.services.coordinator.store import StateStore
from crossfeed.services.coordinator.writer import Fenced, NotLeader, Record, WriteFailed

if TYPE_CHECKING:
    from crossfeed.services.coordinator.writer import StateWriter

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
PAST = {
    "pause": "paused",
    "resume": "resumed",
    "remove": "removed",
    "fail_over": "failed over",
    "fail_back": "failed back",
}
PutResult = str
"""What ``put`` did: ``created``, ``updated`` or ``unchanged``."""


class FeedChanges:
    """Changes to the stored feeds, made by the leader for REST requests."""

    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        writer: StateWriter,
        leadership: Leadership,
        decisions: Decisions,
        lock: threading.RLock,
        lead: Callable[[int], None],
    ) -> None:
        """``lead(now)``: decide again at ``now`` (the caller holds ``lock``)."""
        self.settings = settings
        self.store = store
        self.writer = writer
        self.leadership = leadership
        self.decisions = decisions
        self.lock = lock
        self.lead = lead

    def create(self, spec: FeedSpec) -> None:
        # Probing clusters takes up to seconds: outside the lock, so the lease keeps ticking.
        lifecycle.check_new_feed(spec, self.store.snapshot(), self.settings, self._probe)
        with self.lock:
            self._require_leader()
            view = self.store.snapshot()
            lifecycle.check_new_feed(spec, view, self.settings, lambda _alias: None)
            now = now_ms()
            epoch = self._epoch()
            records: list[Record] = [
                (feed_key(spec.name), StoredFeed(spec, now).encode()),
                (
                    status_key(spec.name),
                    FeedStatus(spec.name, "normal", updated_at_ms=now, leader_epoch=epoch).encode(),
                ),
            ]
            self._write_or_moved(records)
            log.info(
                "created changefeed %s: %s -> %s, %s mode, topics %s%s, %d task(s)",
                spec.name,
                spec.source,
                spec.sink_uri,
                spec.mode,
                spec.topics,
                f" excluding {spec.exclude}" if spec.exclude else "",
                spec.config.staging_partitions,
            )
            self.lead(now_ms())

    def put(self, spec: FeedSpec) -> PutResult:
        """Create the feed, or change an existing one (topics, rename format, options)."""
        stored = self.store.snapshot().feeds.get(spec.name)
        if stored is None or self.store.snapshot().state(spec.name) == "removed":
            self.create(spec)
            return "created"
        with self.lock:
            self._require_leader()
            stored = self.store.snapshot().feeds.get(spec.name)
            if stored is None or self.store.snapshot().state(spec.name) == "removed":
                raise NotLeaderNow()  # removed meanwhile: the client's retry creates it
            spec = updates.unmasked(stored.spec, spec)
            if not updates.check_update(stored.spec, spec):
                return "unchanged"
            self._write_or_moved(
                [(feed_key(spec.name), StoredFeed(spec, stored.created_at_ms).encode())]
            )
            log.info(
                "updated changefeed %s: topics %s%s, rename format %s, options %s "
                "(running pullers pick it up; running tasks after a restart)",
                spec.name,
                spec.topics,
                f" excluding {spec.exclude}" if spec.exclude else "",
                spec.rename_format,
                StoredFeed(spec, 0).record()["config"],
            )
            return "updated"

    def restart(self, name: str, task: int | None) -> list[int]:
        """Revoke the feed's tasks (or one) and give them out again once let go."""
        with self.lock:
            self._require_leader()
            view = self.store.snapshot()
            state = (view.state(name) or "normal") if name in view.feeds else None
            tasks = lifecycle.restartable(
                name, state, view.feeds[name].spec if state else None, task
            )
            owner = {s: i for i, a in view.assignments.get(name, {}).items() for s in a.tasks}
            now = now_ms()
            self.decisions.hold(name, tasks, owner, now)
            log.info("restarting task(s) %s of changefeed %s", ", ".join(map(str, tasks)), name)
            self.lead(now)
            return tasks

    def act(self, name: str, action: lifecycle.Action) -> None:
        with self.lock:
            self._require_leader()
            view = self.store.snapshot()
            state = (view.state(name) or "normal") if name in view.feeds else None
            new_state = lifecycle.transition(name, state, action)
            if new_state == state:
                return
            previous = view.statuses.get(name) or FeedStatus(name, "normal")
            status = replace(
                previous,
                state=new_state,  # type: ignore[arg-type]
                last_error=None if new_state == "normal" else previous.last_error,
                updated_at_ms=now_ms(),
                leader_epoch=self._epoch(),
            )
            self._write_or_moved([(status_key(name), status.encode())])
            self.decisions.error_since.pop(name, None)
            log.info("%s changefeed %s (was %s)", PAST[action], name, state)
            self.lead(now_ms())

    def _require_leader(self) -> None:
        if not self.leadership.is_leader():
            raise NotLeaderNow()

    def _epoch(self) -> int:
        epoch = self.leadership.leading_epoch
        if epoch is None:
            raise NotLeaderNow()
        return epoch

    def _write_or_moved(self, records: list[Record]) -> None:
        """Write for a REST request; once more if we were fenced but still lead."""
        for attempt in (1, 2):
            try:
                self.writer.write(records, guard=self.leadership.is_leader)
                return
            except Fenced as err:
                if not self.leadership.fenced(err) or attempt == 2:
                    raise NotLeaderNow() from None
            except NotLeader:
                raise NotLeaderNow() from None
            except WriteFailed as err:
                raise lifecycle.LifecycleError(503, f"could not store the change: {err}") from None

    def _probe(self, alias: str) -> str | None:
        conf = self.settings.cluster(alias).client_config()
        answered, texts = clients.probe(conf, PROBE_TIMEOUT_S)
        if answered:
            return None
        refused = diagnose(alias, conf, texts)  # reachable, but our settings are wrong
        if refused:
            return refused
        return (
            f"no broker answers at {conf.get('bootstrap.servers')} (waited "
            f"{PROBE_TIMEOUT_S:.0f}s); start the cluster ('crossfeed local start {alias}' for "
            f"the local stack) or fix {alias}.bootstrap.servers in the configuration"
        )
