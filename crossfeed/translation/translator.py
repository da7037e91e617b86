"""The translator of one feed: source group offsets → destination offsets, every tick.

The coordinator leader ticks one :class:`Translator` per running mirror feed (every
``coordinator.translate_interval_s``, default 1 s). Between ticks, group commits are
followed as a stream: the translator tails the source's ``__consumer_offsets``
(``commit_log.py``), keeps each wanted group's latest commit, and translates and writes
a commit as soon as it is read — within ~100 ms of the commit, with no admin request
per group. Where that topic cannot be read (no right to, or not there yet) the tick
lists the groups' offsets instead (poll); :attr:`Translator.commit_mode` says which.

A tick:

1. reads the source (``source.py``): its consumer groups (filtered, ``filters.py``) and
   their committed offsets on the feed's topics — from the commit stream, or listed when
   polling — and each partition's end offset and newest timestamp. When the source does
   not answer, the tick goes on with what it knows: the last commits read or listed,
   newer commits seen in ``__consumer_timestamps`` (followed all the time), and — after
   a restart — the checkpoints it wrote before;
2. translates every (group, partition) by the rules of ``rules.py`` through the feed's
   OffsetSync runs (followed from the start of ``_crossfeed.offset-syncs`` on the target,
   ``books.py``), reading the source only where the runs cannot tell (bounded, cached),
   and knowing each partition's log start (asked every 30 s, remembered in the feed's
   own checkpoint rows): a position in records the source deleted before they were
   copied is moved as the feed's ``gap.policy`` says (rule 0) and reported
   (:meth:`Translator.notices`);
3. writes a GroupCheckpoint for every translation that changed, and the feed's own
   per-partition rows every few seconds (``destination.py``, ``checkpoints.py``);
4. moves each destination group to its translation — only while it has no active members
   there, and never backwards;
5. now and then drops runs no group needs any more (``SyncBook.truncate``).

Fencing: a deposed leader that still ticks writes the same translations the new one
does; checkpoints are idempotent and destination offsets only move forward, so two
translators cannot undo each other's work.

:func:`translate_once` translates one group without a running translator (the REST API
on a coordinator that does not lead, tests, tools).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from crossfeed.config import Settings
from crossfeed.core import gaps
from crossfeed.core.partitions import TopicPartition
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.translation import kafka_io, metrics
from crossfeed.translation.books import Frontier, RecordedBook, StampBook, SyncBook, SyncEntry
from crossfeed.translation.checkpoints import FEED_ROW, read_checkpoints
from crossfeed.translation.commit_log import Commit, CommitBook, commit_mode
from crossfeed.translation.destination import Destination
from crossfeed.translation.filters import TranslationFilter
from crossfeed.translation.follow import (
    Follower,
    follow_commits,
    follow_recorded,
    follow_stamps,
    follow_syncs,
)
from crossfeed.translation.kafka_io import TP, Unreachable
from crossfeed.translation.latest import COMMIT_LOG, Known
from crossfeed.translation.reader import RangeReader
from crossfeed.translation.results import GroupTranslation, PartitionTranslation, TickReport
from crossfeed.translation.rpo import PartitionRpo, partition_rpo, position_rpo
from crossfeed.translation.rules import (
    FRONTIER_SCAN_LIMIT,
    ConsumerStamp,
    LogStart,
    Method,
    decide,
)
from crossfeed.translation.scan import RangeScan, Seen, classify
from crossfeed.translation.source import SourceView, Where, now_ms
from crossfeed.wire import topics

log = logging.getLogger(__name__)

FEED_ROWS_EVERY_S: Final = 5.0
TRUNCATE_EVERY_S: Final = 30.0
FINAL_PROBE_S: Final = 1.0
"""How long the final round (failover) waits for the source to accept a connection."""
RECORDED_MARGIN_MS: Final = 100
RECORDED_WAIT_S: Final = 1.0
"""With the source down, the final round first waits (this long at most) until the
commits recorded on the destination up to RECORDED_MARGIN_MS after its start are read."""


class Translator:
    """Translates the consumer groups of one mirror feed; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        feed: FeedSpec,
        *,
        syncs: Follower[SyncBook] | None = None,
        stamps: Follower[StampBook] | None = None,
        recorded: Follower[RecordedBook] | None = None,
        translation_filter: TranslationFilter | None = None,
        stream_commits: bool = True,
        commits_topic: str | None = None,
    ) -> None:
        """``stream_commits``: follow ``__consumer_offsets`` (else always poll);
        ``commits_topic``: follow another topic instead (tests of the fallback)."""
        target = feed.sink.cluster
        if feed.sink.scheme != "kafka" or target is None or feed.mode != "mirror":
            raise ValueError(
                f"feed {feed.name!r} is not a mirror feed into Kafka: consumer groups can only "
                "be translated between two Kafka clusters"
            )
        self.feed = feed
        self.target_alias = target
        self.source_conf = settings.cluster(feed.source).client_config()
        self.target_conf = settings.cluster(target).client_config()
        self.filter = translation_filter or filter_of(feed)
        self.source = SourceView(
            feed.name, feed.source, self.source_conf, self.filter.group, self._wanted
        )
        self.target_cluster_id: str | None = None
        self._own_syncs = syncs is None
        self._own_stamps = stamps is None
        self._syncs = syncs
        self._stamps = stamps
        self._own_recorded = recorded is None
        self._recorded = recorded
        self._lock = threading.RLock()
        self._started = False
        self._closed = False
        self._results: dict[Where, PartitionTranslation] = {}
        self._notices: list[str] = []  # replaced, never changed: read without the lock
        self._feed_rows_at = 0.0
        self._truncated_at = 0.0
        self._destination: Destination | None = None
        self._target_reader: RangeReader | None = None
        self._stream_commits = stream_commits
        self._commits_topic = commits_topic
        self._commits: Follower[CommitBook] | None = None
        self._arrived = threading.Event()
        self._arrivals: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> Translator:
        """Start following the offset syncs (target) and consumer timestamps (source) and
        read back the checkpoints written before; idempotent."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the translator of feed {self.feed.name} was closed")
            if self._started:
                return self
            if self._syncs is None:
                self._syncs = follow_syncs(self.target_conf)
            if self._stamps is None:
                self._stamps = follow_stamps(self.source_conf)
            if self._recorded is None:
                self._recorded = follow_recorded(self.target_conf)
            if self._stream_commits and self._commits is None:
                # Per feed, not shared: the book keeps only this feed's groups and topics.
                book = CommitBook(self.filter.group, self._wanted)
                extra = {"topic": self._commits_topic} if self._commits_topic else {}
                self._commits = follow_commits(self.source_conf, book, self._arrived.set, **extra)
                self._arrivals = threading.Thread(
                    target=self._follow_arrivals, name=f"commits-{self.feed.name}", daemon=True
                )
                self._arrivals.start()
            self.source.open()
            self._target_reader = RangeReader(self.target_conf, f"translator-{self.feed.name}")
            self._destination = Destination(self.feed.name, self.target_alias, self.target_conf)
            self._started = True
            self._seed_from_checkpoints()
            return self

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (a translator never started is not closed)."""
        return self._closed

    def close(self) -> None:
        with self._lock:
            if not self._started:
                return
            self._closed = True
            if self._own_syncs and self._syncs is not None:
                self._syncs.stop()
            if self._own_stamps and self._stamps is not None:
                self._stamps.stop()
            if self._own_recorded and self._recorded is not None:
                self._recorded.stop()
            if self._commits is not None:
                self._commits.stop()
            self._arrived.set()  # the arrivals thread sees _closed and ends
            self.source.close()
            if self._target_reader is not None:
                self._target_reader.close()
            self.destination.close()
            self._started = False

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the offset syncs that existed at start have been read."""
        self.start()
        return self.syncs.wait(timeout_s)

    @property
    def syncs(self) -> Follower[SyncBook]:
        assert self._syncs is not None, "start() the translator first"
        return self._syncs

    @property
    def stamps(self) -> Follower[StampBook]:
        assert self._stamps is not None, "start() the translator first"
        return self._stamps

    @property
    def recorded(self) -> Follower[RecordedBook]:
        """Commits the client library's opt-in recorded on the target."""
        assert self._recorded is not None, "start() the translator first"
        return self._recorded

    @property
    def destination(self) -> Destination:
        assert self._destination is not None, "start() the translator first"
        return self._destination

    @property
    def source_cluster_id(self) -> str | None:
        return self.source.cluster_id

    @property
    def source_up(self) -> bool:
        return self.source.up

    @property
    def commit_mode(self) -> str:
        """How group commits reach this translator: ``stream`` or ``poll (why)``."""
        return self._commit_mode()[1]

    def _commit_mode(self) -> tuple[bool, str]:
        if self._commits is None:
            return False, "poll (stream off)" if not self._stream_commits else "poll (not started)"
        return commit_mode(self._commits.caught_up.is_set(), self._commits.problem)

    # -- rounds ----------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """One translation round (see the module docstring); never raises for an
        unreachable cluster."""
        with self._lock:
            return self._round(recheck=False, exact_only=False)

    def final(self, *, exact_only: bool = False) -> tuple[list[PartitionTranslation], TickReport]:
        """The last translation of every known group, written (failover, failback): a
        round that looks at every destination group again, even one it moved before.
        ``exact_only``: move a group partition only where the translation is exact."""
        reachable = self.source.probe(FINAL_PROBE_S)  # before the lock: a tick may hold it
        if not reachable:
            self._read_recorded_commits()
        with self._lock:
            self.source.probed(reachable, FINAL_PROBE_S)
            self.source.ask_starts()
            # Listed even while the commit log is followed: a source that answers gives
            # the groups' last commits now, and the report can say they are the last.
            report = self._round(recheck=True, exact_only=exact_only, list_groups=True)
            results = self._with_positions(self._results.values(), report.source_reachable)
            return sorted(results, key=_order), report

    def _read_recorded_commits(self) -> None:
        """The source is gone: the last commits recorded on the target may have been
        written a moment ago; wait (bounded) until they are read."""
        recorded = self._recorded
        if recorded is None or recorded.wait_read_after(
            now_ms() + RECORDED_MARGIN_MS, RECORDED_WAIT_S
        ):
            return
        log.warning(
            "feed %s: %s on %s not read up to now; translating from what was read",
            self.feed.name,
            topics.DESTINATION_TIMESTAMPS,
            self.target_alias,
        )

    def _with_positions(
        self, results: Iterable[PartitionTranslation], source_reachable: bool
    ) -> list[PartitionTranslation]:
        """The translations with their position RPO (``rpo.position_rpo``) as of now."""
        now = now_ms()
        frontiers = {(e.topic, e.partition): e.frontier() for e in self._feed_entries()}
        # Commits read from the log are known up to the log's last read, however old.
        read_at = self._commits.read_at_ms if self._commits is not None else -1
        out = []
        for r in results:
            frontier = frontiers.get((r.topic, r.partition))
            known_until = r.known_at_ms
            if r.known_from == COMMIT_LOG:
                known_until = max(known_until, read_at)
            position = position_rpo(
                source_reachable=source_reachable,
                exact=r.exact,
                method=r.method,
                target_offset=r.target_offset,
                target_frontier=frontier.target_next if frontier is not None else None,
                known_from=r.known_from,
                known_until_ms=known_until,
                committed_at_ms=r.committed_at_ms,
                now_ms=now,
            )
            out.append(replace(r, position=position))
        return out

    def _round(self, *, recheck: bool, exact_only: bool, list_groups: bool = False) -> TickReport:
        began = time.monotonic()
        self.start()
        report = TickReport(self.feed.name, ready=self.syncs.caught_up.is_set())
        if not report.ready:
            report.note = f"reading {topics.OFFSET_SYNCS} on {self.target_alias}"
            return report
        self._ensure_ids()
        streaming, report.commits = self._commit_mode()
        if streaming:
            self._positions_from_commits()
        self.source.refresh(self._interesting_partitions, list_groups=list_groups or not streaming)
        results = [
            self._translate_one(g, t, p, known)
            for (g, t, p), known in sorted(self._positions().items())
        ]
        self._results = {(r.group, r.topic, r.partition): r for r in results}
        self._note_deleted()
        self.destination.ensure_topic()
        report.source_reachable = self.source.up
        report.groups = len({r.group for r in results})
        report.partitions = len(results)
        try:
            report.checkpoints_written = self.destination.checkpoints(
                results, self.source_cluster_id or ""
            )
            movable = [r for r in results if r.exact or not exact_only]
            self.destination.move_groups(movable, report, recheck=recheck)
            if recheck or time.monotonic() - self._feed_rows_at >= FEED_ROWS_EVERY_S:
                self._write_feed_rows()
        except Unreachable as err:
            report.note = f"target {self.target_alias}: {err}"
            log.warning("feed %s: translation not written: %s", self.feed.name, err)
        if time.monotonic() - self._truncated_at >= TRUNCATE_EVERY_S:
            self._truncate()
        report.took_s = time.monotonic() - began
        self._publish(results, report)
        return report

    # -- commits as they arrive -------------------------------------------------------------

    def _positions_from_commits(self) -> None:
        """Every wanted group's position, as the commit log has it now (a round
        translates them all, so the changes pending for the arrivals thread are taken)."""
        assert self._commits is not None
        with self._commits.locked() as book:
            book.take_changed()
            latest = book.items()
        positions: dict[str, dict[TP, Known]] = {}
        for (group, topic, partition), commit in latest:
            positions.setdefault(group, {})[(topic, partition)] = _known(commit)
        self.source.positions = positions

    def _follow_arrivals(self) -> None:
        while not self._closed:
            self._arrived.wait()
            self._arrived.clear()
            if self._closed:
                return
            try:
                self.translate_arrivals()
            except Exception:  # the next batch, or the next tick, tries again
                log.exception("feed %s: translating new commits failed", self.feed.name)

    def translate_arrivals(self) -> int:
        """Translate and write the commits read since last time (the group partitions
        they touch); returns how many were translated. Does nothing until the commit log
        was read to its end (the first round translates everything anyway)."""
        commits = self._commits
        if commits is None or not self._commit_mode()[0]:
            return 0
        with commits.locked() as book:
            changed = book.take_changed()
        if not changed:
            return 0
        with self._lock:
            if self._closed or not self._started or not self.syncs.caught_up.is_set():
                return 0
            self._ensure_ids()
            # A partition seen for the first time: its log start first (rule 0).
            unknown = {(t, p) for (_, t, p) in changed if (t, p) not in self.source.starts}
            if unknown:
                self.source.try_refresh_ends(unknown)
            fresh: list[PartitionTranslation] = []
            for (group, topic, partition), commit in changed.items():
                self.source.committed(group, (topic, partition), _known(commit) if commit else None)
                if commit is None:
                    self._results.pop((group, topic, partition), None)
                    continue
                result = self._translate_one(group, topic, partition, _known(commit))
                self._results[(group, topic, partition)] = result
                fresh.append(result)
            self._note_deleted()
            if not fresh:
                return 0
            self.destination.ensure_topic()
            report = TickReport(self.feed.name, ready=True, source_reachable=self.source.up)
            touched = {r.group for r in fresh}
            try:
                self.destination.checkpoints(fresh, self.source_cluster_id or "")
                # Every partition of a touched group, so a move never looks partial.
                group_results = [r for r in self._results.values() if r.group in touched]
                self.destination.move_groups(group_results, report, recheck=False)
            except Unreachable as err:
                log.warning("feed %s: new commits not written: %s", self.feed.name, err)
            metrics.ARRIVALS.labels(self.feed.name).inc(len(fresh))
            return len(fresh)

    def translate_group(self, group: str) -> GroupTranslation:
        """Translate one group now (fresh offsets if the source answers); writes nothing.
        The feed's group filters do not apply: an operator asked for this group."""
        with self._lock:
            self.start()
            if not self.syncs.wait(30):
                raise TimeoutError(
                    f"could not read {topics.OFFSET_SYNCS} on {self.target_alias} within 30s"
                )
            self._ensure_ids()
            positions = self.source.group(group, self._stamp_items(), self._recorded_items())
            results = [
                self._translate_one(group, topic, partition, known)
                for (topic, partition), known in sorted(positions.items())
            ]
            members: int | None
            try:
                members = kafka_io.active_members(self.destination.admin, [group])[group]
            except Unreachable:
                members = None
            return GroupTranslation(
                self.feed.name,
                group,
                self.source.up,
                self.filter.group(group),
                members,
                results,
            )

    def results(self) -> list[PartitionTranslation]:
        """The translations of the last round."""
        with self._lock:
            return sorted(self._results.values(), key=_order)

    # -- what is known ---------------------------------------------------------------------

    def _ensure_ids(self) -> None:
        if self.target_cluster_id is None:
            self.target_cluster_id = clients.cluster_id(self.target_conf, 5.0)
        if self.source.cluster_id is None:
            with self.syncs.locked() as book:
                known = {e.source_cluster for e in book.of_feed(self.feed.name)}
            if len(known) == 1:
                self.source.cluster_id = known.pop()

    def _wanted(self, topic: str) -> bool:
        return self.feed.selector.selects(topic) and self.filter.topic(topic)

    def _feed_entries(self) -> list[SyncEntry]:
        with self.syncs.locked() as book:
            entries = book.of_feed(self.feed.name)
        if self.source.cluster_id is not None:
            entries = [e for e in entries if e.source_cluster == self.source.cluster_id]
        return [e for e in entries if self._wanted(e.topic)]

    def _interesting_partitions(self) -> set[TP]:
        tps = {(e.topic, e.partition) for e in self._feed_entries()}
        for offsets in self.source.positions.values():
            tps.update(offsets)
        return tps

    def _stamp_items(self) -> list[tuple[Where, ConsumerStamp]]:
        with self.stamps.locked() as book:
            return book.items()

    def _recorded_items(self) -> list[tuple[Where, Known]]:
        with self.recorded.locked() as book:
            return book.of_cluster(self.source.cluster_id)

    def _positions(self) -> dict[Where, Known]:
        return self.source.merged(self._stamp_items(), recorded=self._recorded_items())

    def _seed_from_checkpoints(self) -> None:
        """Start from the positions and source ends this feed's translator last wrote, so a
        coordinator that (re)starts while the source is down still knows them."""
        try:
            rows = read_checkpoints(self.target_conf, self.feed.name, timeout_s=10)
        except Exception as err:  # the target may be slow to answer at start: go on without
            log.warning("feed %s: could not read earlier checkpoints: %s", self.feed.name, err)
            return
        for (group, topic, partition), row in rows.items():
            tp = (topic, partition)
            signature = (
                row.source_offset,
                row.target_offset,
                row.exact,
                row.gap_records,
                row.source_log_start,
            )
            if group == FEED_ROW:
                self.source.remember_end(tp, row.source_offset, row.translated_at_ms)
                if row.source_log_start >= 0:
                    self.source.starts.setdefault(tp, row.source_log_start)
            else:
                self.source.remember(group, tp, row.source_offset, row.translated_at_ms)
            self.destination.remember(group, topic, partition, signature)
            if self.source.cluster_id is None and row.source_cluster:
                self.source.cluster_id = row.source_cluster

    # -- translating -----------------------------------------------------------------------

    def _translate_one(
        self, group: str, topic: str, partition: int, known: Known
    ) -> PartitionTranslation:
        offset = known.offset
        with self.syncs.locked() as book:
            entry = book.get(self.feed.name, topic, partition)
            if entry is not None and self.source.cluster_id not in (None, entry.source_cluster):
                entry = None  # runs of another source cluster say nothing about this one
            found = (
                entry.index.translate(offset) if entry is not None and len(entry.index) else None
            )
            target = (entry.target_topic, entry.target_partition) if entry else None
            next_copied = entry.index.next_copied(offset) if entry is not None else None
        target = target or (self.feed.target_topic(topic), partition)
        start = self.source.starts.get((topic, partition))
        log_start = None
        if start is not None:
            tp = TopicPartition(topic, partition)
            acked = gaps.key_of(tp, offset) in gaps.acknowledged(self.feed.config.gap_acknowledged)
            policy = self.feed.config.gap_policy
            log_start = LogStart(tp, start, next_copied, policy, acked)
        with self.stamps.locked() as stamps:
            stamp = stamps.get(group, topic, partition)
        if stamp is None:  # the copy on the target, if the group has the opt-in
            with self.recorded.locked() as recorded:
                stamp = recorded.stamp(self.source.cluster_id, group, topic, partition)
        outcome = decide(offset, found, stamp, _Lookups(self, topic, partition, target), log_start)
        return PartitionTranslation(
            group=group,
            topic=topic,
            partition=partition,
            source_offset=offset,
            target_topic=target[0],
            target_partition=target[1],
            target_offset=outcome.target_offset,
            exact=outcome.exact,
            method=outcome.method.value,
            gap=outcome.gap,
            consumer_timestamp_ms=stamp.timestamp_ms if stamp is not None else -1,
            translated_at_ms=now_ms(),
            known_from=known.via,
            known_at_ms=known.seen_at_ms,
            committed_at_ms=known.committed_at_ms,
            source_log_start=-1 if start is None else start,
            lost=outcome.lost,
            held=outcome.held,
        )

    def notices(self) -> list[str]:
        """Group positions in records the source deleted before they were copied and not
        acknowledged, as the last translation found them (rule 0), one line each:
        ``crossfeed status`` shows them. Never waits for a round under way."""
        return list(self._notices)

    def _note_deleted(self) -> None:
        acked = gaps.acknowledged(self.feed.config.gap_acknowledged)
        found = [r for r in sorted(self._results.values(), key=_order) if r.key not in acked]
        self._notices = [line for r in found if (line := r.lost_line(self.feed.name)) is not None]

    def scan(
        self, topic: str, partition: int, start: int, end: int, limit: int
    ) -> RangeScan | None:
        """A bounded, cached read of source records, classified for this feed's target."""
        target_topic, target_partition = self._target_of(topic, partition)
        target_id = self.target_cluster_id or ""

        def kind(msg: Any) -> Seen:
            return classify(
                msg.offset(),
                msg.headers(),
                target_cluster_id=target_id,
                target_topic=target_topic,
                target_partition=target_partition,
                timestamp_ms=msg.timestamp()[1],
            )

        return self.source.scan(topic, partition, start, end, limit, kind)

    def _target_of(self, topic: str, partition: int) -> TP:
        with self.syncs.locked() as book:
            entry = book.get(self.feed.name, topic, partition)
            if entry is not None:
                return entry.target_topic, entry.target_partition
        return self.feed.target_topic(topic), partition

    def by_timestamp(self, target: TP, timestamp_ms: int) -> int | None:
        try:
            return kafka_io.offset_for_time(self.destination.admin, target, timestamp_ms)
        except Unreachable:
            return None

    # -- recovery point --------------------------------------------------------------------

    def rpo(
        self,
        partitions: Iterable[TP] | None = None,
        *,
        read_target: bool = True,
        floors: Mapping[TP, int] | None = None,
    ) -> list[PartitionRpo]:
        """Per source partition: the records known on the source that the target lacks
        (see ``rpo.py``); reads the source when it answers. ``partitions``: these (their
        end offsets asked for now), else every partition the feed has copied or that a
        group has committed on. ``floors``: where the feed started copying a partition."""
        floors = floors or {}
        with self._lock:
            frontiers: dict[TP, Frontier | None] = {
                (e.topic, e.partition): e.frontier() for e in self._feed_entries()
            }
            if partitions is not None:
                wanted = sorted(set(partitions))
                frontiers = {tp: frontiers.get(tp) for tp in wanted}
                self.source.try_refresh_ends(wanted)
            else:
                for tp in self.source.ends:
                    if self._wanted(tp[0]):
                        frontiers.setdefault(tp, None)
            consumed: dict[TP, int] = {}
            for (_, t, p), stamp in self._stamp_items():
                consumed[(t, p)] = max(consumed.get((t, p), -1), stamp.timestamp_ms)
            return [
                self._rpo_row(tp, frontier, floors.get(tp, 0), consumed, read_target)
                for tp, frontier in sorted(frontiers.items())
            ]

    def _rpo_row(
        self,
        tp: TP,
        frontier: Frontier | None,
        floor: int,
        consumed: Mapping[TP, int],
        read_target: bool,
    ) -> PartitionRpo:
        known = self.source.ends.get(tp)
        start = max(frontier.source_next if frontier is not None else 0, floor)
        scan = None
        if known is not None and known.end > start:
            scan = self.scan(tp[0], tp[1], start, known.end, FRONTIER_SCAN_LIMIT)
        newest = max(known.max_ts_ms if known is not None else -1, consumed.get(tp, -1))
        last_replicated = -1
        if read_target and frontier is not None and self._target_reader is not None:
            target_topic, target_partition = self._target_of(*tp)
            try:
                last_replicated = self._target_reader.record_timestamp(
                    target_topic, target_partition, frontier.target_next - 1
                )
            except Unreachable:
                last_replicated = -1
        return partition_rpo(
            tp[0],
            tp[1],
            frontier=frontier,
            source_end=known.end if known is not None else None,
            scan=scan,
            newest_source_ts_ms=newest,
            last_replicated_ts_ms=last_replicated,
            known_at_ms=known.seen_at_ms if known is not None else 0,
            floor=floor,
        )

    # -- upkeep ----------------------------------------------------------------------------

    def _write_feed_rows(self) -> None:
        """The feed's own per-partition rows (source end, frontier, unreplicated)."""
        source_cluster = self.source_cluster_id or ""
        for row in self.rpo(read_target=False):
            if row.source_end is not None and row.target_frontier is not None:
                target = self._target_of(row.topic, row.partition)
                start = self.source.starts.get((row.topic, row.partition), -1)
                self.destination.feed_row(row, target, source_cluster, start)
        self.destination.flush()
        self._feed_rows_at = time.monotonic()

    def _truncate(self) -> None:
        """Drop runs below the lowest offset any group holds (or the log start)."""
        lowest: dict[TP, int] = {}
        for (_, t, p), known in self._positions().items():
            lowest[(t, p)] = min(lowest.get((t, p), known.offset), known.offset)
        dropped = 0
        with self.syncs.locked() as book:
            for entry in book.of_feed(self.feed.name):
                tp = (entry.topic, entry.partition)
                cut = lowest.get(tp, self.source.starts.get(tp, 0))
                if cut > 0:
                    dropped += book.truncate(self.feed.name, entry.topic, entry.partition, cut)
        if dropped:
            log.debug(
                "feed %s: dropped %d offset-sync runs no group needs", self.feed.name, dropped
            )
        self._truncated_at = time.monotonic()

    def _publish(self, results: list[PartitionTranslation], report: TickReport) -> None:
        name = self.feed.name
        metrics.TICKS.labels(name).inc()
        metrics.ROUND_SECONDS.labels(name).observe(report.took_s)
        metrics.SOURCE_UP.labels(name).set(1 if self.source.up else 0)
        metrics.COMMITS_STREAMED.labels(name).set(1 if report.commits == "stream" else 0)
        for method in Method:
            metrics.PARTITIONS.labels(name, method.value).set(
                sum(1 for r in results if r.method == method.value)
            )
        metrics.GAP_RECORDS.labels(name).set(sum(max(r.gap, 0) for r in results))
        acked = gaps.acknowledged(self.feed.config.gap_acknowledged)
        lost = [r.lost.count for r in results if r.lost is not None and r.key not in acked]
        metrics.DELETED_RECORDS.labels(name).set(sum(lost))
        metrics.HELD_PARTITIONS.labels(name).set(sum(1 for r in results if r.held))


class _Lookups:
    """The I/O :func:`decide` may ask for, bound to one partition."""

    def __init__(self, translator: Translator, topic: str, partition: int, target: TP) -> None:
        self.translator = translator
        self.topic = topic
        self.partition = partition
        self.target = target

    def scan(self, start: int, end: int, limit: int) -> RangeScan | None:
        return self.translator.scan(self.topic, self.partition, start, end, limit)

    def by_timestamp(self, timestamp_ms: int) -> int | None:
        return self.translator.by_timestamp(self.target, timestamp_ms)


def filter_of(feed: FeedSpec) -> TranslationFilter:
    """The feed's translation filters (``translate.*`` options)."""
    options = feed.config
    return TranslationFilter(
        groups=options.translate_groups,
        groups_exclude=options.translate_groups_exclude,
        topics_exclude=options.translate_topics_exclude,
    )


def _known(commit: Commit) -> Known:
    """A commit read from the log is known as of its commit time (broker clock): the
    consumer-timestamp merge compares that with the commits the wrapper recorded."""
    return Known(commit.offset, commit.committed_at_ms, commit.committed_at_ms, COMMIT_LOG)


def _order(r: PartitionTranslation) -> Where:
    return (r.group, r.topic, r.partition)


def translate_once(
    settings: Settings, feed: FeedSpec, group: str, timeout_s: float = 30.0
) -> GroupTranslation:
    """Translate one group without a running translator (reads the offset syncs first)."""
    translator = Translator(settings, feed, stream_commits=False)  # one look: no stream
    try:
        if not translator.wait_ready(timeout_s):
            raise TimeoutError(
                f"could not read {topics.OFFSET_SYNCS} on {translator.target_alias} "
                f"within {timeout_s:.0f}s"
            )
        return translator.translate_group(group)
    finally:
        translator.close()


__all__ = [
    "GroupTranslation",
    "PartitionTranslation",
    "TickReport",
    "Translator",
    "filter_of",
    "translate_once",
]
