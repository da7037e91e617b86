"""One coordinator instance: follows the state and the heartbeats, competes for the lease,
and — while it leads — assigns puller tasks and publishes each feed's status.

Every ``TICK_S`` the instance takes one lease step (``leadership.py``); a leader then
decides on one snapshot (state + live members, ``decisions.py``): the assignment rounds
of ``scheduler.py`` and the statuses of ``status.py``, written together in one fenced
transaction, each decision logged as one line. REST mutations (``api.py``, made by
``changes.py``) take the same lock as the tick, so decisions never interleave.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaException
from fastapi import Depends

from crossfeed.config import Settings
from crossfeed.config.errors import ConfigError
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka.diagnose import diagnose
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.services.coordinator import lifecycle, metrics
from crossfeed.services.coordinator.api import leader_only, make_app, token_check
from crossfeed.services.coordinator.changes import PROBE_TIMEOUT_S, FeedChanges, PutResult
from crossfeed.services.coordinator.decisions import Decisions
from crossfeed.services.coordinator.dr import dr_routes
from crossfeed.services.coordinator.failover import FailoverHooks, TranslatorLoop, make_router
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.leadership import LeaderInfo, Leadership, now_ms
from crossfeed.services.coordinator.members import Members, MembersView
from crossfeed.services.coordinator.rest_server import RestServer
from crossfeed.services.coordinator.status import control_lost
from crossfeed.services.coordinator.store import StateStore
from crossfeed.services.coordinator.writer import (
    Fenced,
    NotLeader,
    Record,
    StateWriter,
    WriteFailed,
)

log = logging.getLogger(__name__)

TICK_S = 0.5
LEADER_READ_WAIT_S = 1.0
"""How long a read of who leads waits for a tick in progress (``Coordinator.leader``)."""
STARTUP_READ_S = 90.0
TRANSLATED_STATES = ("normal", "error", "paused")
READ_SYNC_TIMEOUT_S = 2.0
LOST_SYNC_TIMEOUT_S = 0.5
"""How long a REST read waits for the state topic once it is known not to answer."""
CONTROL_LOST_S = 3.0
"""The control cluster away this long: every running feed is shown in error."""


class Coordinator:
    """One coordinator instance; see the module docstring."""

    def __init__(self, settings: Settings, instance_id: str, host: str, port: int) -> None:
        self.settings = settings
        self.instance_id = instance_id
        control = settings.control_alias()
        self.control = control
        self.conf = settings.cluster(control).client_config()
        self.timeout_ms = int(settings.coordinator.failover_timeout_s * 1000)
        # The lease expires well within failover.timeout, so a standby leads within it.
        ttl_ms = max(self.timeout_ms // 2, 1000)
        self.store = StateStore(self.conf)
        self.writer = StateWriter(self.conf, self.store, max(2 * ttl_ms, 10_000))
        self.leadership = Leadership(self.store, self.writer, instance_id, ttl_ms)
        self.members = Members(self.conf)
        self.lock = threading.RLock()
        stuck_ms = int(settings.coordinator.error_stuck_s * 1000)
        self.decisions = Decisions(self.timeout_ms, stuck_ms)
        self.changes = FeedChanges(
            settings,
            self.store,
            self.writer,
            self.leadership,
            self.decisions,
            self.lock,
            self._lead_at,
        )
        # Offset translation runs on the leader, one translator per running mirror feed.
        self.translators = TranslatorLoop(settings)
        tls = settings.coordinator.tls_cert_file, settings.coordinator.tls_key_file
        app = make_app(
            self, settings.api_token, https=tls[0] is not None, ca_file=settings.server_ca_file
        )
        app.include_router(
            make_router(
                FailoverHooks(
                    settings,
                    find_feed=self.find_feed,
                    mark_failed_over=self.mark_failed_over,
                    mark_failed_back=lambda name: self.act(name, "fail_back"),
                    remove_feed=lambda name: self.act(name, "remove"),
                    create_feed=self.create,
                    unassigned_tasks=self.unassigned_tasks,
                    translator=self.translators.translator,
                    take_translator=self.translators.take,
                    leader_only=leader_only(self),
                    dependencies=[Depends(token_check(settings.api_token))],
                )
            )
        )
        app.include_router(
            dr_routes(self, settings, token_check(settings.api_token), leader_only(self))
        )
        self.rest = RestServer(app, host, port, tls_files=tls)
        self.heartbeats: HeartbeatSender | None = None

    # -- life cycle ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        answered, texts = clients.probe(self.conf, PROBE_TIMEOUT_S)
        refused = None if answered else diagnose(self.control, self.conf, texts)
        if refused:  # retrying cannot help: the configuration must change
            raise ConfigError(f"control cluster: {refused}")
        try:
            ensure_control_topics(self.conf)
        except KafkaException as err:
            raise RuntimeError(
                f"cannot use the control cluster {self.control} "
                f"({self.conf.get('bootstrap.servers')}): {err.args[0].str()}; start it "
                f"('crossfeed local up') or fix control_cluster in the configuration"
            ) from None
        self.store.start()
        self.members.start()
        # Generous: a brand-new cluster on a busy machine can take a while to answer.
        if not self.store.sync(STARTUP_READ_S) or not self.members.caught_up.wait(STARTUP_READ_S):
            raise RuntimeError(
                f"could not read the control topics on {self.control} in {STARTUP_READ_S:.0f}s"
            )
        self.rest.start()
        address = self.rest.advertised_address()
        self.heartbeats = HeartbeatSender(
            self.conf,
            self.instance_id,
            "coordinator",
            lambda: HeartbeatContent(address=address),
        ).start()
        log.info(
            "coordinator %s: REST API on %s://%s (docs at /docs), control cluster %s, "
            "failover timeout %.1fs",
            self.instance_id,
            self.rest.scheme,
            address,
            self.control,
            self.timeout_ms / 1000,
        )
        try:
            while not stop.is_set():
                try:
                    self.tick()
                except Exception:  # one bad tick must not take the coordinator down
                    log.exception("tick failed; trying again in %.1fs", TICK_S)
                stop.wait(TICK_S)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        self.translators.stop()
        with self.lock:
            self.leadership.release()
        if self.heartbeats is not None:
            self.heartbeats.leave()
        self.rest.stop()
        self.store.stop()
        self.members.stop()
        log.info("coordinator %s stopped", self.instance_id)

    def commit_modes(self) -> dict[str, str]:
        """How each translated feed's translator gets group commits (the leader runs them)."""
        return self.translators.commit_modes()

    def translation_notices(self) -> dict[str, list[str]]:
        """Per translated feed, group positions in records deleted at the source."""
        return self.translators.notices()

    def status(self) -> dict[str, Any]:
        info = self.leadership.info()
        return {
            "role": "coordinator",
            "instance": self.instance_id,
            "state": "leader" if info.leading else "standby",
            "leader": info.holder,
            "epoch": info.epoch,
            "address": self.rest.advertised_address(),
            "feeds": len(self.store.snapshot().feeds),
        }

    # -- the tick ------------------------------------------------------------------------

    def tick(self) -> None:
        with self.lock:
            self.leadership.step()
            now = now_ms()
            members = self.members.view(now, self.timeout_ms)
            self.members.forget_silent(now, 10 * self.timeout_ms)
            if self.leadership.is_leader():
                self._lead(now, members)
                self.translators.sync(self._translated_feeds())
            else:
                self.translators.sync([])
            metrics.publish(self.store.snapshot(), self.members.ages_ms(now), now, members)

    def _lead(self, now: int, members: MembersView) -> None:
        epoch = self.leadership.leading_epoch
        assert epoch is not None
        decided = self.decisions.decide(self.store.snapshot(), members, now, epoch)
        if self._write(decided.records()):
            decided.log()

    def _lead_at(self, now: int) -> None:
        self._lead(now, self.members.view(now, self.timeout_ms))

    def _write(self, records: list[Record]) -> bool:
        try:
            self.writer.write(records, guard=self.leadership.is_leader)
            return True
        except Fenced as err:
            self.leadership.fenced(err)  # decisions are made again next tick
        except NotLeader as err:
            log.warning("decisions not written: %s", err)
        except WriteFailed as err:
            log.warning("decisions not written, retrying next tick: %s", err)
        return False

    # -- what the REST API calls ---------------------------------------------------------

    def views(self) -> tuple[StateView, MembersView, int]:
        # Read the log to its end first (milliseconds), so a client reading from a standby
        # right after a change sees it; when that fails, answer from what we have — with
        # every running feed in error once the control cluster has been away a while.
        wait_s = READ_SYNC_TIMEOUT_S if not self.store.sync_error else LOST_SYNC_TIMEOUT_S
        synced = self.store.sync(wait_s)
        now = now_ms()
        view = self.store.snapshot()
        away_s = self.store.unreachable_for()
        if not synced and away_s >= CONTROL_LOST_S:
            reason = (
                f"control cluster {self.control} ({self.conf.get('bootstrap.servers')}) "
                f"unreachable for {away_s:.0f}s: {self.store.sync_error}"
            )
            view = replace(view, statuses=control_lost(view.statuses, reason))
        return view, self.members.view(now, self.timeout_ms), now

    def leader(self) -> LeaderInfo:
        # Under the lock when it comes soon: never the instant inside a tick where a
        # fenced leader has stepped down and not yet taken its writer back (tens of ms).
        # But a tick may hold the lock for seconds while a cluster is away, and who leads
        # is still answered then.
        locked = self.lock.acquire(timeout=LEADER_READ_WAIT_S)
        try:
            return self.leadership.info()
        finally:
            if locked:
                self.lock.release()

    # Changes to the feeds (changes.py), made by the leader under the tick's lock.

    def create(self, spec: FeedSpec) -> None:
        self.changes.create(spec)

    def put(self, spec: FeedSpec) -> PutResult:
        """Create the feed, or change an existing one (topics, rename format, options)."""
        return self.changes.put(spec)

    def restart(self, name: str, task: int | None) -> list[int]:
        """Revoke the feed's tasks (or one) and give them out again once let go."""
        return self.changes.restart(name, task)

    def act(self, name: str, action: lifecycle.Action) -> None:
        self.changes.act(name, action)

    def _translated_feeds(self) -> list[FeedSpec]:
        """Feeds whose consumer groups are translated: every one still replicating."""
        view = self.store.snapshot()
        return [
            stored.spec
            for name, stored in view.feeds.items()
            if view.state(name) in TRANSLATED_STATES
        ]

    def find_feed(self, name: str) -> FeedSpec | None:
        """A stored feed that is not removed (for the failover routes)."""
        view = self.store.snapshot()
        stored = view.feeds.get(name)
        return stored.spec if stored and view.state(name) != "removed" else None

    def unassigned_tasks(self, name: str) -> int:
        """Tasks of a stored feed that no puller holds in the latest assignment."""
        view = self.store.snapshot()
        stored = view.feeds.get(name)
        if stored is None:
            return 0
        owned = {s for a in view.assignments.get(name, {}).values() for s in a.tasks}
        return max(stored.spec.config.staging_partitions - len(owned), 0)

    def mark_failed_over(self, name: str) -> None:
        """Set a feed failed_over: its tasks stop (leader only, like ``act``)."""
        self.act(name, "fail_over")
