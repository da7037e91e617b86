"""What a translator knows about its source cluster — also once the cluster is gone.

The source is asked every round while it answers: its consumer groups and their
committed offsets, each partition's end offset and newest timestamp. Everything learnt is
kept with when it was learnt, so a round with the source down goes on from there. After a
failure the source is asked again only every ``RETRY_S`` (each try costs a timeout).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaException

from crossfeed.kafka import clients, reachable
from crossfeed.kafka.topics import partitions_of
from crossfeed.translation import kafka_io
from crossfeed.translation.kafka_io import TP, PartlyAnswered, Unreachable
from crossfeed.translation.latest import CHECKPOINT, SOURCE_TIMESTAMPS, Known, latest
from crossfeed.translation.reader import RangeReader
from crossfeed.translation.rules import ConsumerStamp
from crossfeed.translation.scan import RangeScan, Seen

log = logging.getLogger(__name__)

RETRY_S: Final = 5.0
STARTS_EVERY_S: Final = 30.0
LIST_EVERY_S: Final = 10.0
SCAN_CACHE: Final = 4096

Where = tuple[str, str, int]
"""(group, topic, partition)."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class SourceEnd:
    end: int
    max_ts_ms: int
    seen_at_ms: int


class SourceView:
    """The source side of one feed's translator (not thread-safe: the owner locks)."""

    def __init__(
        self,
        feed: str,
        alias: str,
        conf: Mapping[str, Any],
        wanted_group: Callable[[str], bool],
        wanted_topic: Callable[[str], bool],
    ) -> None:
        self.feed = feed
        self.alias = alias
        self.conf = dict(conf)
        self.wanted_group = wanted_group
        self.wanted_topic = wanted_topic
        self.admin = kafka_io.shared_admin(self.conf, quiet=True)  # lazy: no client yet
        self.reader: RangeReader | None = None
        self.cluster_id: str | None = None
        self.up = False
        self.positions: dict[str, dict[TP, Known]] = {}
        self.ends: dict[TP, SourceEnd] = {}
        self.starts: dict[TP, int] = {}
        self._retry_at = 0.0
        self._starts_at = 0.0
        self.listed: set[TP] = set()
        """Every partition of the source's wanted topics, as last listed."""
        self._listed_at = 0.0
        self._unanswered: set[str] = set()
        self._scans: OrderedDict[tuple[str, int, int, int, int], RangeScan] = OrderedDict()

    def open(self) -> None:
        self.reader = RangeReader(self.conf, f"translator-{self.feed}")

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    # -- reachability ----------------------------------------------------------------------

    def worth_asking(self) -> bool:
        return self.up or time.monotonic() >= self._retry_at

    def lost(self, err: Exception) -> None:
        if self.up or self._retry_at == 0.0:
            log.warning(
                "feed %s: source %s does not answer (%s); translating from what is known",
                self.feed,
                self.alias,
                err,
            )
        self.up = False
        self._retry_at = time.monotonic() + RETRY_S

    def probe(self, timeout_s: float) -> bool:
        """Before a round that must be quick (failover): does a bootstrap server accept a
        connection within ``timeout_s``? If none does, the requests in flight on the source
        give up at once (a round of another thread waiting out its timeout there would
        hold up the caller). Touches no state of the view: call without the owner's lock,
        then :meth:`probed` with it."""
        accepted = reachable.accepts_connections(self.conf, timeout_s)
        if not accepted:
            self.admin.interrupt()
        return accepted

    def probed(self, reachable: bool, timeout_s: float) -> None:
        """Apply a :meth:`probe`: a source that refused is lost now — the round goes on
        from what is known instead of waiting out a timeout per request; one that accepted
        is asked in this round even if it failed a moment ago (it may be back)."""
        if reachable:
            self._retry_at = min(self._retry_at, time.monotonic())
        else:
            self.lost(Unreachable(f"no bootstrap server accepted a connection in {timeout_s}s"))

    def answered(self) -> None:
        if not self.up:
            log.info("feed %s: source %s answers", self.feed, self.alias)
        self.up = True

    # -- what is asked ---------------------------------------------------------------------

    def refresh(self, partitions: Callable[[], Iterable[TP]], *, list_groups: bool = True) -> None:
        """Every wanted group's offsets (unless ``list_groups`` is False: the commits are
        followed as a stream), then the ends of ``partitions()`` (which may depend on the
        groups just listed)."""
        if not self.worth_asking():
            return
        stamp = now_ms()
        try:
            if self.cluster_id is None:
                self.cluster_id = clients.cluster_id(self.conf, 3.0)
                if self.cluster_id is None:
                    raise Unreachable("no cluster.id")
            if list_groups:
                self._list_positions(stamp)
            self._list_wanted()
            self.refresh_ends(set(partitions()) | self.listed, stamp)
        except Unreachable as err:
            self.lost(err)
            return
        self.answered()

    def _list_positions(self, stamp: int) -> None:
        """Every wanted group's committed offsets (raises Unreachable). A group whose
        request failed keeps what was known of it; one that answered with no offsets of
        the wanted topics is forgotten."""
        wanted = [g for g in kafka_io.list_groups(self.admin, 3.0) if self.wanted_group(g)]
        try:
            listed = kafka_io.group_offsets(self.admin, wanted)
        except PartlyAnswered as err:
            listed = err.answered
            self._report_unanswered(wanted, listed, err)
        else:
            self._unanswered = set()
        still = set(wanted)  # a group no longer on the source is forgotten
        positions = {g: p for g, p in self.positions.items() if g in still}
        for g, offs in listed.items():
            positions[g] = {
                tp: Known(o, stamp) for tp, o in offs.items() if self.wanted_topic(tp[0])
            }
        self.positions = {g: p for g, p in positions.items() if p}

    def _report_unanswered(
        self, wanted: list[str], listed: Mapping[str, object], err: PartlyAnswered
    ) -> None:
        unanswered = {g for g in wanted if g not in listed}
        if unanswered - self._unanswered:
            log.warning(
                "feed %s: source %s did not give the offsets of %d group(s) this round (%s); "
                "their last known offsets stay in use",
                self.feed,
                self.alias,
                len(unanswered),
                err,
            )
        self._unanswered = unanswered

    def _list_wanted(self) -> None:
        """List the partitions of the wanted topics (every LIST_EVERY_S): a partition the
        feed has not copied yet — a topic created a moment before the source was lost —
        still has its records counted in the RPO."""
        if time.monotonic() - self._listed_at < LIST_EVERY_S:
            return
        try:
            self.listed = set(partitions_of(self.admin.client(), self.wanted_topic, 3.0))
        except KafkaException as err:
            raise Unreachable(f"list topics: {err}") from None
        self._listed_at = time.monotonic()

    def refresh_ends(self, tps: Iterable[TP], stamp: int | None = None) -> None:
        """End offsets and newest timestamps of ``tps`` (raises Unreachable)."""
        wanted = sorted(tps)
        stamp = now_ms() if stamp is None else stamp
        ends = kafka_io.end_offsets(self.admin, wanted)
        newest = kafka_io.max_timestamps(self.admin, wanted)
        for tp, end in ends.items():
            self.ends[tp] = SourceEnd(end, newest.get(tp, -1), stamp)
        due = time.monotonic() - self._starts_at >= STARTS_EVERY_S
        if due or any(tp not in self.starts for tp in wanted):
            self.starts.update(kafka_io.start_offsets(self.admin, wanted))
            self._starts_at = time.monotonic()

    def ask_starts(self) -> None:
        """Ask the log start offsets again at the next refresh (a final round)."""
        self._starts_at = 0.0

    def try_refresh_ends(self, tps: Iterable[TP]) -> None:
        if self.worth_asking():
            try:
                self.refresh_ends(tps)
                self.answered()
            except Unreachable as err:
                self.lost(err)

    def group(
        self,
        group: str,
        stamps: list[tuple[Where, ConsumerStamp]],
        recorded: Iterable[tuple[Where, Known]] = (),
    ) -> dict[TP, Known]:
        """One group's positions: listed now if the source answers, else what is known."""
        if self.worth_asking():
            try:
                listed = kafka_io.group_offsets(self.admin, [group]).get(group, {})
                mine = {tp: o for tp, o in listed.items() if self.wanted_topic(tp[0])}
                self.refresh_ends(mine)
                self.answered()
                stamp = now_ms()
                return {tp: Known(o, stamp) for tp, o in mine.items()}
            except Unreachable as err:
                self.lost(err)
        merged = self.merged(stamps, lambda g: g == group, recorded)
        return {(t, p): known for (_, t, p), known in merged.items()}

    def merged(
        self,
        stamps: list[tuple[Where, ConsumerStamp]],
        wanted_group: Callable[[str], bool] | None = None,
        recorded: Iterable[tuple[Where, Known]] = (),
    ) -> dict[Where, Known]:
        """Each group partition's commit to translate (``latest.py``): what the source
        said, replaced — while the source is down — by a newer commit the client library
        recorded, in ``stamps`` (``__consumer_timestamps`` of the source) or ``recorded``
        (more, e.g. the destination's copies)."""
        wanted_group = wanted_group or self.wanted_group
        out = {
            (g, t, p): known
            for g, offsets in self.positions.items()
            if wanted_group(g)
            for (t, p), known in offsets.items()
        }
        if self.up:
            return out
        others: dict[Where, list[Known]] = {}
        for where, stamp in stamps:
            others.setdefault(where, []).append(
                Known(
                    stamp.committed_offset,
                    stamp.committed_at_ms,
                    stamp.committed_at_ms,
                    SOURCE_TIMESTAMPS,
                )
            )
        for where, known in recorded:
            others.setdefault(where, []).append(known)
        for (g, t, p), candidates in others.items():
            if not (wanted_group(g) and self.wanted_topic(t)):
                continue
            chosen = latest(out.get((g, t, p)), candidates, source_up=False)
            if chosen is not None:
                out[(g, t, p)] = chosen
        return out

    def committed(self, group: str, tp: TP, known: Known | None) -> None:
        """A commit (or, None, a deletion) read from the source's commit log: it is what
        the source holds now, so it replaces what was listed."""
        if known is not None:
            self.positions.setdefault(group, {})[tp] = known
            return
        offsets = self.positions.get(group, {})
        offsets.pop(tp, None)
        if not offsets:
            self.positions.pop(group, None)

    def remember(self, group: str, tp: TP, offset: int, at_ms: int) -> None:
        """A position learnt elsewhere (a checkpoint written before); listing wins."""
        self.positions.setdefault(group, {}).setdefault(tp, Known(offset, at_ms, via=CHECKPOINT))

    def remember_end(self, tp: TP, end: int, at_ms: int) -> None:
        self.ends.setdefault(tp, SourceEnd(end, -1, at_ms))

    # -- reading ---------------------------------------------------------------------------

    def scan(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        limit: int,
        classify: Callable[[Any], Seen],
    ) -> RangeScan | None:
        """A bounded, cached read (None when the source cannot be read now). Only scans
        wholly below the end of the partition are cached: nothing changes there."""
        key = (topic, partition, start, end, limit)
        cached = self._scans.get(key)
        if cached is not None:
            self._scans.move_to_end(key)
            return cached
        if not self.worth_asking() or self.reader is None:
            return None
        try:
            result, stable = self.reader.scan(topic, partition, start, end, limit, classify)
        except Unreachable as err:
            self.lost(err)
            return None
        if stable:
            self._scans[key] = result
            while len(self._scans) > SCAN_CACHE:
                self._scans.popitem(last=False)
        return result
