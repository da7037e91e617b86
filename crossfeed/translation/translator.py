"""The translator of one feed: source group offsets → destination offsets, every tick.

The coordinator leader ticks one :class:`Translator` per running mirror feed (every
``coordinator.translate_interval_s``, default 1 s). A tick:

1. reads the source: its consumer groups (filtered, ``filters.py``) and their committed
   offsets on the feed's topics (AdminClient), and each partition's end offset and newest
   timestamp. When the source does not answer, the tick goes on with what it knows: the
   offsets last listed, newer commits seen in ``__consumer_timestamps`` (followed all the
   time), and — after a restart — the checkpoints it wrote before;
2. translates every (group, partition) by the rules of ``rules.py`` through the feed's
   OffsetSync runs (followed from the start of ``_crossfeed.offset-syncs`` on the target,
   ``books.py``), reading the source only where the runs cannot tell (bounded, cached);
3. writes a GroupCheckpoint for every translation that changed, and the feed's own
   per-partition rows (``checkpoints.py``) every few seconds;
4. moves the destination group to the translated offsets — only while the group has no
   active members there, and never backwards (a destination group ahead of the
   translation has consumed there itself);
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
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.translation import kafka_io, metrics
from crossfeed.translation.books import Frontier, StampBook, SyncBook, SyncEntry
from crossfeed.translation.checkpoints import (
    FEED_ROW,
    StoredCheckpoint,
    read_checkpoints,
)
from crossfeed.translation.destination import Destination
from crossfeed.translation.filters import TranslationFilter
from crossfeed.translation.follow import Follower, follow_stamps, follow_syncs
from crossfeed.translation.kafka_io import TP, RangeReader, Unreachable
from crossfeed.translation.results import GroupTranslation, PartitionTranslation, TickReport
from crossfeed.translation.rpo import PartitionRpo, partition_rpo
from crossfeed.translation.rules import (
    FRONTIER_SCAN_LIMIT,
    ConsumerStamp,
    Method,
    Outcome,
    decide,
)
from crossfeed.translation.scan import RangeScan, classify
from crossfeed.wire import topics

log = logging.getLogger(__name__)

SOURCE_RETRY_S: Final = 5.0
"""While the source is down, it is asked again this often (each try costs a timeout)."""
FEED_ROWS_EVERY_S: Final = 5.0
TRUNCATE_EVERY_S: Final = 30.0
SCAN_CACHE: Final = 4096


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class _Known:
    offset: int
    seen_at_ms: int


@dataclass(frozen=True, slots=True)
class _SourceEnd:
    end: int
    max_ts_ms: int
    seen_at_ms: int


class Translator:
    """Translates the consumer groups of one mirror feed; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        feed: FeedSpec,
        *,
        syncs: Follower[SyncBook] | None = None,
        stamps: Follower[StampBook] | None = None,
        translation_filter: TranslationFilter | None = None,
    ) -> None:
        target = feed.sink.cluster
        if feed.sink.scheme != "kafka" or target is None or feed.mode != "mirror":
            raise ValueError(
                f"feed {feed.name!r} is not a mirror feed into Kafka: consumer groups can only "
                "be translated between two Kafka clusters"
            )
        self.settings = settings
        self.feed = feed
        self.source_alias = feed.source
        self.target_alias = target
        self.source_conf = settings.cluster(feed.source).client_config()
        self.target_conf = settings.cluster(target).client_config()
        self.filter = translation_filter or filter_of(feed)
        self._own_syncs = syncs is None
        self._own_stamps = stamps is None
        self._syncs = syncs
        self._stamps = stamps
        self._lock = threading.RLock()
        self._started = False
        self._closed = False
        self.source_cluster_id: str | None = None
        self.target_cluster_id: str | None = None
        self.source_up = False
        self._retry_at = 0.0
        self._positions: dict[str, dict[TP, _Known]] = {}
        self._ends: dict[TP, _SourceEnd] = {}
        self._starts: dict[TP, int] = {}
        self._results: dict[tuple[str, str, int], PartitionTranslation] = {}
        self._scans: OrderedDict[tuple[str, int, int, int, int], RangeScan] = OrderedDict()
        self._feed_rows_at = 0.0
        self._truncated_at = 0.0
        self._source_admin: Any = None
        self._destination: Destination | None = None
        self._reader: RangeReader | None = None
        self._target_reader: RangeReader | None = None

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
            self._source_admin = kafka_io.shared_admin(self.source_conf, quiet=True)
            self._reader = RangeReader(self.source_conf, f"translator-{self.feed.name}")
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
            for reader in (self._reader, self._target_reader):
                if reader is not None:
                    reader.close()
            if self._destination is not None:
                self._destination.close()
            self._started = False

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the offset syncs that existed at start have been read."""
        self.start()
        assert self._syncs is not None
        return self._syncs.wait(timeout_s)

    @property
    def syncs(self) -> Follower[SyncBook]:
        assert self._syncs is not None, "start() the translator first"
        return self._syncs

    @property
    def destination(self) -> Destination:
        assert self._destination is not None, "start() the translator first"
        return self._destination

    @property
    def stamps(self) -> Follower[StampBook]:
        assert self._stamps is not None, "start() the translator first"
        return self._stamps

    # -- the tick --------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """One translation round (see the module docstring); never raises for an
        unreachable cluster."""
        with self._lock:
            return self._round(recheck=False, exact_only=False)

    def final(self, *, exact_only: bool = False) -> tuple[list[PartitionTranslation], TickReport]:
        """The last translation of every known group, written (failover, failback): a
        round that looks at every destination group again, even one it moved before.
        ``exact_only``: move a group partition only where the translation is exact."""
        with self._lock:
            report = self._round(recheck=True, exact_only=exact_only)
            return sorted(self._results.values(), key=_order), report

    def _round(self, *, recheck: bool, exact_only: bool) -> TickReport:
        began = time.monotonic()
        self.start()
        report = TickReport(self.feed.name, ready=self.syncs.caught_up.is_set())
        if not report.ready:
            report.note = f"reading {topics.OFFSET_SYNCS} on {self.target_alias}"
            return report
        self._ensure_ids()
        self._refresh_source()
        results = self._translate_all()
        self.destination.ensure_topic()
        report.source_reachable = self.source_up
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

    def translate_group(self, group: str) -> GroupTranslation:
        """Translate one group now (fresh offsets if the source answers); writes nothing."""
        with self._lock:
            self.start()
            if not self.syncs.wait(30):
                raise TimeoutError(
                    f"could not read {topics.OFFSET_SYNCS} on {self.target_alias} within 30s"
                )
            self._ensure_ids()
            positions = self._positions_of(group)
            results = [
                self._translate_one(group, topic, partition, known.offset)
                for (topic, partition), known in sorted(positions.items())
            ]
            admin = self.destination.admin
            try:
                members: int | None = kafka_io.active_members(admin, [group])[group]
            except Unreachable:
                members = None
            return GroupTranslation(
                self.feed.name,
                group,
                self.source_up,
                self.filter.group(group),
                members,
                results,
            )

    def results(self) -> list[PartitionTranslation]:
        """The translations of the last tick."""
        with self._lock:
            return sorted(self._results.values(), key=_order)

    # -- reading the source ----------------------------------------------------------------

    def _ensure_ids(self) -> None:
        if self.target_cluster_id is None:
            self.target_cluster_id = clients.cluster_id(self.target_conf, 5.0)
        if self.source_cluster_id is None:
            with self.syncs.locked() as book:
                known = {e.source_cluster for e in book.of_feed(self.feed.name)}
            if len(known) == 1:
                self.source_cluster_id = known.pop()

    def _wanted(self, topic: str) -> bool:
        return self.feed.selector.selects(topic) and self.filter.topic(topic)

    def _feed_entries(self) -> list[SyncEntry]:
        with self.syncs.locked() as book:
            entries = book.of_feed(self.feed.name)
        if self.source_cluster_id is not None:
            entries = [e for e in entries if e.source_cluster == self.source_cluster_id]
        return [e for e in entries if self._wanted(e.topic)]

    def _source_reachable_now(self) -> bool:
        return self.source_up or time.monotonic() >= self._retry_at

    def _lost_source(self, err: Exception) -> None:
        if self.source_up or self._retry_at == 0.0:
            log.warning(
                "feed %s: source %s does not answer (%s); translating from what is known",
                self.feed.name,
                self.source_alias,
                err,
            )
        self.source_up = False
        self._retry_at = time.monotonic() + SOURCE_RETRY_S

    def _refresh_source(self) -> None:
        if not self._source_reachable_now():
            return
        stamp = now_ms()
        try:
            if self.source_cluster_id is None:
                self.source_cluster_id = clients.cluster_id(self.source_conf, 3.0)
                if self.source_cluster_id is None:
                    raise Unreachable("no cluster.id")
            groups = [
                g for g in kafka_io.list_groups(self._source_admin, 3.0) if self.filter.group(g)
            ]
            listed = kafka_io.group_offsets(self._source_admin, groups)
            positions = {
                group: {tp: _Known(o, stamp) for tp, o in offsets.items() if self._wanted(tp[0])}
                for group, offsets in listed.items()
            }
            # A group that no longer has offsets on the source is forgotten.
            self._positions = {g: p for g, p in positions.items() if p}
            self._refresh_ends(self._interesting_partitions(), stamp)
        except Unreachable as err:
            self._lost_source(err)
            return
        if not self.source_up:
            log.info("feed %s: source %s answers", self.feed.name, self.source_alias)
        self.source_up = True

    def _interesting_partitions(self) -> set[TP]:
        tps = {(e.topic, e.partition) for e in self._feed_entries()}
        for offsets in self._positions.values():
            tps.update(offsets)
        return tps

    def _refresh_ends(self, tps: Iterable[TP], stamp: int) -> None:
        wanted = sorted(tps)
        ends = kafka_io.end_offsets(self._source_admin, wanted)
        newest = kafka_io.max_timestamps(self._source_admin, wanted)
        for tp, end in ends.items():
            self._ends[tp] = _SourceEnd(end, newest.get(tp, -1), stamp)
        if time.monotonic() - self._truncated_at >= TRUNCATE_EVERY_S:
            self._starts.update(kafka_io.start_offsets(self._source_admin, wanted))

    def _positions_of(self, group: str) -> dict[TP, _Known]:
        """One group's positions: listed now if the source answers, else what is known."""
        if self._source_reachable_now():
            try:
                listed = kafka_io.group_offsets(self._source_admin, [group]).get(group, {})
                stamp = now_ms()
                self._refresh_ends({tp for tp in listed if self._wanted(tp[0])}, stamp)
                if not self.source_up:
                    log.info("feed %s: source %s answers", self.feed.name, self.source_alias)
                self.source_up = True
                return {tp: _Known(o, stamp) for tp, o in listed.items() if self._wanted(tp[0])}
            except Unreachable as err:
                self._lost_source(err)
        return {
            (t, p): known for (g, t, p), known in self._merged_positions().items() if g == group
        }

    def _merged_positions(self) -> dict[tuple[str, str, int], _Known]:
        """Listed offsets, overridden — while the source is down — by newer commits the
        consumer wrapper recorded (they can be newer than the last listing)."""
        out = {
            (g, t, p): known
            for g, offsets in self._positions.items()
            for (t, p), known in offsets.items()
        }
        if self.source_up:
            return out
        with self.stamps.locked() as book:
            stamps = book.items()
        for (g, t, p), stamp in stamps:
            if not (self.filter.group(g) and self._wanted(t)):
                continue
            known = out.get((g, t, p))
            if known is None or stamp.committed_at_ms > known.seen_at_ms:
                out[(g, t, p)] = _Known(stamp.committed_offset, stamp.committed_at_ms)
        return out

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
            if group == FEED_ROW:
                self._ends.setdefault(tp, _SourceEnd(row.source_offset, -1, row.translated_at_ms))
            else:
                self._positions.setdefault(group, {}).setdefault(
                    tp, _Known(row.source_offset, row.translated_at_ms)
                )
                self.destination.remember(group, topic, partition, _signature_of(row))
            if self.source_cluster_id is None and row.source_cluster:
                self.source_cluster_id = row.source_cluster

    # -- translating -----------------------------------------------------------------------

    def _translate_all(self) -> list[PartitionTranslation]:
        results = [
            self._translate_one(g, t, p, known.offset)
            for (g, t, p), known in sorted(self._merged_positions().items())
        ]
        self._results = {(r.group, r.topic, r.partition): r for r in results}
        return results

    def _translate_one(
        self, group: str, topic: str, partition: int, offset: int
    ) -> PartitionTranslation:
        with self.syncs.locked() as book:
            entry = book.get(self.feed.name, topic, partition)
            if entry is not None and self.source_cluster_id not in (None, entry.source_cluster):
                entry = None  # runs of another source cluster say nothing about this one
            found = (
                entry.index.translate(offset) if entry is not None and len(entry.index) else None
            )
            target_topic = entry.target_topic if entry else self.feed.target_topic(topic)
            target_partition = entry.target_partition if entry else partition
        with self.stamps.locked() as stamps:
            stamp = stamps.get(group, topic, partition)
        lookups = _Lookups(self, topic, partition, target_topic, target_partition)
        outcome: Outcome = decide(offset, found, stamp, lookups)
        return PartitionTranslation(
            group=group,
            topic=topic,
            partition=partition,
            source_offset=offset,
            target_topic=target_topic,
            target_partition=target_partition,
            target_offset=outcome.target_offset,
            exact=outcome.exact,
            method=outcome.method.value,
            gap=outcome.gap,
            consumer_timestamp_ms=stamp.timestamp_ms if stamp is not None else -1,
            translated_at_ms=now_ms(),
        )

    def scan(
        self, topic: str, partition: int, start: int, end: int, limit: int
    ) -> RangeScan | None:
        """A bounded, cached read of the source (None when it cannot be read now)."""
        key = (topic, partition, start, end, limit)
        cached = self._scans.get(key)
        if cached is not None:
            self._scans.move_to_end(key)
            return cached
        if not self._source_reachable_now() or self._reader is None:
            return None
        target_topic, target_partition = self._target_of(topic, partition)
        target_id = self.target_cluster_id or ""

        def kind(msg: Any) -> Any:
            return classify(
                msg.offset(),
                msg.headers(),
                target_cluster_id=target_id,
                target_topic=target_topic,
                target_partition=target_partition,
                timestamp_ms=msg.timestamp()[1],
            )

        try:
            result, stable = self._reader.scan(topic, partition, start, end, limit, kind)
        except Unreachable as err:
            self._lost_source(err)
            return None
        if stable:
            self._scans[key] = result
            while len(self._scans) > SCAN_CACHE:
                self._scans.popitem(last=False)
        return result

    def _target_of(self, topic: str, partition: int) -> TP:
        with self.syncs.locked() as book:
            entry = book.get(self.feed.name, topic, partition)
            if entry is not None:
                return entry.target_topic, entry.target_partition
        return self.feed.target_topic(topic), partition

    def by_timestamp(
        self, target_topic: str, target_partition: int, timestamp_ms: int
    ) -> int | None:
        try:
            return kafka_io.offset_for_time(
                self.destination.admin, (target_topic, target_partition), timestamp_ms
            )
        except Unreachable:
            return None

    # -- writing ---------------------------------------------------------------------------

    def _write_feed_rows(self) -> None:
        """The feed's own per-partition rows (source end, frontier, unreplicated)."""
        source_cluster = self.source_cluster_id or ""
        for row in self.rpo(read_target=False):
            if row.source_end is not None and row.target_frontier is not None:
                target = self._target_of(row.topic, row.partition)
                self.destination.feed_row(row, target, source_cluster)
        self.destination.flush()
        self._feed_rows_at = time.monotonic()

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
                if self._source_reachable_now():
                    try:
                        self._refresh_ends(wanted, now_ms())
                        self.source_up = True
                    except Unreachable as err:
                        self._lost_source(err)
            else:
                for tp in self._ends:
                    if self._wanted(tp[0]):
                        frontiers.setdefault(tp, None)
            stamp_times: dict[TP, int] = {}
            with self.stamps.locked() as book:
                for (_, t, p), stamp in book.items():
                    stamp_times[(t, p)] = max(stamp_times.get((t, p), -1), stamp.timestamp_ms)
            rows = []
            for tp, frontier in sorted(frontiers.items()):
                known = self._ends.get(tp)
                floor = floors.get(tp, 0)
                start = max(frontier.source_next if frontier is not None else 0, floor)
                scan = None
                if known is not None and known.end > start:
                    scan = self.scan(tp[0], tp[1], start, known.end, FRONTIER_SCAN_LIMIT)
                newest = max(known.max_ts_ms if known is not None else -1, stamp_times.get(tp, -1))
                last_replicated = -1
                if read_target and frontier is not None and self._target_reader is not None:
                    target_topic, target_partition = self._target_of(*tp)
                    try:
                        last_replicated = self._target_reader.record_timestamp(
                            target_topic, target_partition, frontier.target_next - 1
                        )
                    except Unreachable:
                        last_replicated = -1
                rows.append(
                    partition_rpo(
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
                )
            return rows

    # -- upkeep ----------------------------------------------------------------------------

    def _truncate(self) -> None:
        """Drop runs below the lowest offset any group holds (or the log start)."""
        lowest: dict[TP, int] = {}
        for (_, t, p), known in self._merged_positions().items():
            lowest[(t, p)] = min(lowest.get((t, p), known.offset), known.offset)
        dropped = 0
        with self.syncs.locked() as book:
            for entry in book.of_feed(self.feed.name):
                tp = (entry.topic, entry.partition)
                cut = lowest.get(tp, self._starts.get(tp, 0))
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
        metrics.TICK_SECONDS.labels(name).set(report.took_s)
        metrics.SOURCE_UP.labels(name).set(1 if self.source_up else 0)
        for method in Method:
            metrics.PARTITIONS.labels(name, method.value).set(
                sum(1 for r in results if r.method == method.value)
            )
        metrics.GAP_RECORDS.labels(name).set(sum(max(r.gap, 0) for r in results))


class _Lookups:
    """The I/O :func:`decide` may ask for, bound to one partition."""

    def __init__(
        self,
        translator: Translator,
        topic: str,
        partition: int,
        target_topic: str,
        target_partition: int,
    ) -> None:
        self.translator = translator
        self.topic = topic
        self.partition = partition
        self.target = (target_topic, target_partition)

    def scan(self, start: int, end: int, limit: int) -> RangeScan | None:
        return self.translator.scan(self.topic, self.partition, start, end, limit)

    def by_timestamp(self, timestamp_ms: int) -> int | None:
        return self.translator.by_timestamp(self.target[0], self.target[1], timestamp_ms)


def filter_of(feed: FeedSpec) -> TranslationFilter:
    """The feed's translation filters (``translate.*`` options)."""
    options = feed.config
    return TranslationFilter(
        groups=options.translate_groups,
        groups_exclude=options.translate_groups_exclude,
        topics_exclude=options.translate_topics_exclude,
    )


def _order(r: PartitionTranslation) -> tuple[str, str, int]:
    return (r.group, r.topic, r.partition)


def _signature_of(row: StoredCheckpoint) -> tuple[int, int, bool, int]:
    return (row.source_offset, row.target_offset, row.exact, row.gap_records)


def translate_once(
    settings: Settings, feed: FeedSpec, group: str, timeout_s: float = 30.0
) -> GroupTranslation:
    """Translate one group without a running translator (reads the offset syncs first)."""
    translator = Translator(settings, feed)
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
    "ConsumerStamp",
    "GroupTranslation",
    "PartitionTranslation",
    "TickReport",
    "Translator",
    "filter_of",
    "translate_once",
]
