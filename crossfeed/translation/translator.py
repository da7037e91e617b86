"""The translator of one feed: source group offsets → destination offsets, every tick.

The coordinator leader ticks one :class:`Translator` per running mirror feed (every
``coordinator.translate_interval_s``, default 1 s). Between ticks, group commits are
followed as a stream: the translator tails the source's ``__consumer_offsets``
(``commit_stream.py``, ``commit_log.py``), keeps each wanted group's latest commit, and
translates and writes a commit as soon as it is read — within ~100 ms of the commit, with
no admin request per group. Where that topic cannot be read (no right to, or not there yet) the tick
lists the groups' offsets instead (poll); :attr:`Translator.commit_mode` says which.

A tick:

1. reads the source (``source.py``): its consumer groups (filtered, ``filters.py``) and
   their committed offsets on the feed's topics — from the commit stream, or listed when
   polling — and each partition's end offset and newest timestamp. When the source does
   not answer, the tick goes on with what it knows (``positions.py``): the last commits
   read or listed, newer commits seen in ``__consumer_timestamps`` (followed all the time),
   and — after a restart — the checkpoints it wrote before;
2. translates every (group, partition) by the rules of ``rules.py`` (``partition.py``)
   through the feed's OffsetSync runs (followed from the start of
   ``_crossfeed.offset-syncs`` on the target, ``books.py``, ``feed_books.py``), reading
   the source only where the runs cannot tell (bounded, cached), and knowing each
   partition's log start (asked every 30 s, remembered in the feed's own checkpoint
   rows): a position in records the source deleted before they were copied is moved as
   the feed's ``gap.policy`` says (rule 0) and reported (:meth:`Translator.notices`,
   ``findings.py``);
3. writes a GroupCheckpoint for every translation that changed, and the feed's own
   per-partition rows every few seconds (``destination.py``, ``checkpoints.py``,
   ``upkeep.py``; the rows' recovery point: ``recovery.py``);
4. moves each destination group to its translation — only while it has no active members
   there, and never backwards;
5. now and then drops runs no group needs any more (``SyncBook.truncate``, ``upkeep.py``).

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
from dataclasses import dataclass
from typing import Final

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.translation import kafka_io, metrics
from crossfeed.translation.books import RecordedBook, StampBook, SyncBook
from crossfeed.translation.commit_stream import CommitStream, known
from crossfeed.translation.destination import Destination
from crossfeed.translation.feed_books import FeedBooks
from crossfeed.translation.filters import TranslationFilter
from crossfeed.translation.findings import Findings, order
from crossfeed.translation.follow import Follower
from crossfeed.translation.kafka_io import TP, Unreachable
from crossfeed.translation.partition import PartitionTranslator
from crossfeed.translation.positions import GroupPositions
from crossfeed.translation.reader import RangeReader
from crossfeed.translation.recovery import RecoveryPoint
from crossfeed.translation.results import GroupTranslation, PartitionTranslation, TickReport
from crossfeed.translation.rpo import PartitionRpo
from crossfeed.translation.source import SourceView, Where
from crossfeed.translation.upkeep import Upkeep
from crossfeed.wire import topics

log = logging.getLogger(__name__)

FINAL_PROBE_S: Final = 1.0
"""How long the final round (failover) waits for the source to accept a connection."""


@dataclass(frozen=True)
class _Parts:
    """What a started translator works with on the target (made by ``start``)."""

    destination: Destination
    target_reader: RangeReader
    partitions: PartitionTranslator
    recovery: RecoveryPoint
    upkeep: Upkeep


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
        self.books = FeedBooks(
            feed,
            self.filter,
            self.source_conf,
            self.target_conf,
            syncs=syncs,
            stamps=stamps,
            recorded=recorded,
        )
        wanted = self.books.wanted
        self.source = SourceView(
            feed.name, feed.source, self.source_conf, self.filter.group, wanted
        )
        self.commits = CommitStream(
            feed.name,
            self.source_conf,
            self.filter.group,
            wanted,
            enabled=stream_commits,
            topic=commits_topic,
        )
        self.positions = GroupPositions(self.books, self.source, self.commits)
        self.findings = Findings(feed)
        self._lock = threading.RLock()
        self._started = False
        self._closed = False
        self._results: dict[Where, PartitionTranslation] = {}
        self._parts: _Parts | None = None

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> Translator:
        """Start following the offset syncs (target) and consumer timestamps (source) and
        read back the checkpoints written before; idempotent."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the translator of feed {self.feed.name} was closed")
            if self._started:
                return self
            self.books.start()
            self.commits.start(self.translate_arrivals)
            self.source.open()
            reader = RangeReader(self.target_conf, f"translator-{self.feed.name}")
            destination = Destination(self.feed.name, self.target_alias, self.target_conf)
            partitions = PartitionTranslator(self.feed, self.books, self.source, destination)
            recovery = RecoveryPoint(self.books, self.source, partitions, reader)
            upkeep = Upkeep(self.feed, self.books, self.source, destination, recovery)
            self._parts = _Parts(destination, reader, partitions, recovery, upkeep)
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
            self.books.stop()
            self.commits.stop()
            self.source.close()
            self.parts.target_reader.close()
            self.destination.close()
            self._started = False

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the offset syncs that existed at start have been read."""
        self.start()
        return self.syncs.wait(timeout_s)

    @property
    def syncs(self) -> Follower[SyncBook]:
        return self.books.syncs

    @property
    def parts(self) -> _Parts:
        assert self._parts is not None, "start() the translator first"
        return self._parts

    @property
    def destination(self) -> Destination:
        return self.parts.destination

    @property
    def commit_mode(self) -> str:
        """How group commits reach this translator: ``stream`` or ``poll (why)``."""
        return self.commits.mode()[1]

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
            self.books.read_recorded_commits(self.target_alias)
        with self._lock:
            self.source.probed(reachable, FINAL_PROBE_S)
            self.source.ask_starts()
            # Listed even while the commit log is followed: a source that answers gives
            # the groups' last commits now, and the report can say they are the last.
            report = self._round(recheck=True, exact_only=exact_only, list_groups=True)
            results = self.positions.with_rpo(self._results.values(), report.source_reachable)
            return sorted(results, key=order), report

    def _round(self, *, recheck: bool, exact_only: bool, list_groups: bool = False) -> TickReport:
        began = time.monotonic()
        self.start()
        report = TickReport(self.feed.name, ready=self.syncs.caught_up.is_set())
        if not report.ready:
            report.note = f"reading {topics.OFFSET_SYNCS} on {self.target_alias}"
            return report
        self._ensure_ids()
        streaming, report.commits = self.commits.mode()
        if streaming:
            self.source.positions = self.commits.positions()
        self.source.refresh(self.positions.partitions, list_groups=list_groups or not streaming)
        translate = self.parts.partitions.translate
        results = [
            translate(g, t, p, at) for (g, t, p), at in sorted(self.positions.merged().items())
        ]
        self._results = {(r.group, r.topic, r.partition): r for r in results}
        self.findings.note_deleted(list(self._results.values()))
        self.destination.ensure_topic()
        report.source_reachable = self.source.up
        report.groups = len({r.group for r in results})
        report.partitions = len(results)
        upkeep = self.parts.upkeep
        try:
            report.checkpoints_written = self.destination.checkpoints(
                results, self.source.cluster_id or ""
            )
            movable = [r for r in results if r.exact or not exact_only]
            self.destination.move_groups(movable, report, recheck=recheck)
            if recheck or upkeep.feed_rows_due():
                upkeep.write_feed_rows()
        except Unreachable as err:
            report.note = f"target {self.target_alias}: {err}"
            log.warning("feed %s: translation not written: %s", self.feed.name, err)
        if upkeep.truncate_due():
            upkeep.truncate(self.positions.merged())
        report.took_s = time.monotonic() - began
        self.findings.publish(results, report, self.source.up)
        return report

    # -- commits as they arrive -------------------------------------------------------------

    def translate_arrivals(self) -> int:
        """Translate and write the commits read since last time (the group partitions
        they touch); returns how many were translated. Does nothing until the commit log
        was read to its end (the first round translates everything anyway)."""
        changed = self.commits.take_changed()
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
                self.source.committed(group, (topic, partition), known(commit) if commit else None)
                if commit is None:
                    self._results.pop((group, topic, partition), None)
                    continue
                result = self.parts.partitions.translate(group, topic, partition, known(commit))
                self._results[(group, topic, partition)] = result
                fresh.append(result)
            self.findings.note_deleted(list(self._results.values()))
            if not fresh:
                return 0
            self.destination.ensure_topic()
            report = TickReport(self.feed.name, ready=True, source_reachable=self.source.up)
            touched = {r.group for r in fresh}
            try:
                self.destination.checkpoints(fresh, self.source.cluster_id or "")
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
            results = [
                self.parts.partitions.translate(group, topic, partition, at)
                for (topic, partition), at in sorted(self.positions.of_group(group).items())
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
            return sorted(self._results.values(), key=order)

    def notices(self) -> list[str]:
        """Group positions in records the source deleted before they were copied and not
        acknowledged, as the last translation found them (rule 0), one line each:
        ``crossfeed status`` shows them. Never waits for a round under way."""
        return self.findings.notices()

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
        with self._lock:
            return self.parts.recovery.rows(partitions, read_target, floors or {})

    # -- what is known ---------------------------------------------------------------------

    def _ensure_ids(self) -> None:
        self.destination.ensure_cluster_id()
        if self.source.cluster_id is None:
            clusters = self.books.source_clusters()
            if len(clusters) == 1:
                self.source.cluster_id = clusters.pop()

    def _seed_from_checkpoints(self) -> None:
        """Start from the positions and source ends this feed's translator last wrote, so a
        coordinator that (re)starts while the source is down still knows them."""
        try:
            rows = self.destination.recall()
        except Exception as err:  # the target may be slow to answer at start: go on without
            log.warning("feed %s: could not read earlier checkpoints: %s", self.feed.name, err)
            return
        self.positions.seed(rows)


def filter_of(feed: FeedSpec) -> TranslationFilter:
    """The feed's translation filters (``translate.*`` options)."""
    options = feed.config
    return TranslationFilter(
        groups=options.translate_groups,
        groups_exclude=options.translate_groups_exclude,
        topics_exclude=options.translate_topics_exclude,
    )


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
