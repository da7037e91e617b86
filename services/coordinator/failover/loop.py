"""The translators of the coordinator leader: one thread per running mirror feed.

The leader calls :meth:`TranslatorLoop.sync` from its tick with the feeds that should be
translated (its running mirror feeds); the call only records them, so the lease tick
never waits for Kafka. Each feed's translator ticks on its own thread every
``coordinator.translate_interval_s``: a feed whose source is down (each try costs a
timeout) does not slow the others. A round that could not start yet (the offset syncs
are still being read) is tried again after ``NOT_READY_RETRY_S``. Between rounds each
translator also translates group commits as it reads them (``translator.py``). The
offset-sync tail of a target cluster and the consumer-timestamp tail of a source cluster
are shared by the feeds that use them; each translator has its own tail of the source's
``__consumer_offsets``, holding only its feed's groups and topics.

Translators started together (a new leader takes over every feed at once) begin their
rounds STAGGER_S apart: a first round opens several Kafka clients, and forty of them at
once starved the leader's own tick on a 2-core machine until its lease ran out.

On losing leadership, call ``sync([])`` (or :meth:`stop`): every translator stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.translation.books import StampBook, SyncBook
from crossfeed.translation.follow import Follower, follow_stamps, follow_syncs
from crossfeed.translation.translator import Translator

log = logging.getLogger(__name__)

STAGGER_S = 0.2  # between the first rounds of translators started by one sync()
NOT_READY_RETRY_S = 0.5


def translatable(feed: FeedSpec) -> bool:
    """Mirror feeds into Kafka have consumer groups to move; others do not."""
    return feed.mode == "mirror" and feed.sink.scheme == "kafka"


class _Runner:
    """Ticks one translator until stopped."""

    def __init__(self, translator: Translator, interval_s: float, delay_s: float) -> None:
        self.translator = translator
        self.interval_s = interval_s
        self.delay_s = delay_s
        self.stop_event = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"translate-{translator.feed.name}", daemon=True
        )

    def _run(self) -> None:
        if self.stop_event.wait(self.delay_s):
            return
        while not self.stop_event.is_set():
            wait_s = self.interval_s
            try:
                if not self.translator.tick().ready:
                    # Still reading the offset syncs: try again soon rather than a whole
                    # interval later (commits arriving meanwhile are translated anyway).
                    wait_s = min(wait_s, NOT_READY_RETRY_S)
            except Exception:  # a bad tick must not end translation for good
                log.exception("feed %s: translation round failed", self.translator.feed.name)
            self.stop_event.wait(wait_s)


class TranslatorLoop:
    """Runs one :class:`Translator` per feed given to :meth:`sync`."""

    def __init__(self, settings: Settings, interval_s: float | None = None) -> None:
        self.settings = settings
        self.interval_s = interval_s or settings.coordinator.translate_interval_s
        self._lock = threading.Lock()
        self._runners: dict[str, _Runner] = {}
        self._taken: list[Translator] = []  # handed over by take(): their tails stay
        self._syncs: dict[str, Follower[SyncBook]] = {}
        self._stamps: dict[str, Follower[StampBook]] = {}

    def sync(self, feeds: Iterable[FeedSpec]) -> None:
        """Translate exactly these feeds (the non-mirror ones are ignored)."""
        wanted = {f.name: f for f in feeds if translatable(f)}
        with self._lock:
            for name in [n for n, r in self._runners.items() if r.translator.feed != wanted.get(n)]:
                self._stop_runner(name, close=True)
            new = [feed for name, feed in sorted(wanted.items()) if name not in self._runners]
            for n, feed in enumerate(new):
                self._start_runner(feed, delay_s=n * STAGGER_S)
            self._drop_unused_tails()

    def translator(self, name: str) -> Translator | None:
        """The running translator of a feed (shared: do not close it)."""
        with self._lock:
            runner = self._runners.get(name)
            return runner.translator if runner is not None else None

    def commit_modes(self) -> dict[str, str]:
        """Per translated feed, how group commits reach its translator (``stream`` or
        ``poll (why)``; see Translator.commit_mode)."""
        with self._lock:
            return {name: r.translator.commit_mode for name, r in sorted(self._runners.items())}

    def notices(self) -> dict[str, list[str]]:
        """Per translated feed, its translator's notices: group positions in records the
        source deleted before they were copied (Translator.notices)."""
        with self._lock:
            runners = sorted(self._runners.items())
        return {name: found for name, r in runners if (found := r.translator.notices())}

    def take(self, name: str) -> Translator | None:
        """Stop ticking a feed and hand its translator — with everything it knows — to the
        caller (failover), who closes it. A later :meth:`sync` that still lists the feed
        starts a fresh one."""
        with self._lock:
            runner = self._runners.pop(name, None)
            if runner is None:
                return None
            runner.stop_event.set()
            self._taken.append(runner.translator)
            return runner.translator

    def stop(self) -> None:
        with self._lock:
            for name in list(self._runners):
                self._stop_runner(name, close=True)
            self._drop_unused_tails()

    def _start_runner(self, feed: FeedSpec, delay_s: float) -> None:
        target = str(feed.sink.cluster)
        syncs = self._syncs.get(target)
        if syncs is None:
            syncs = self._syncs[target] = follow_syncs(
                self.settings.cluster(target).client_config()
            )
        stamps = self._stamps.get(feed.source)
        if stamps is None:
            stamps = self._stamps[feed.source] = follow_stamps(
                self.settings.cluster(feed.source).client_config()
            )
        translator = Translator(self.settings, feed, syncs=syncs, stamps=stamps)
        runner = _Runner(translator, self.interval_s, delay_s)
        self._runners[feed.name] = runner
        runner.thread.start()
        log.info("feed %s: translating consumer groups every %.1fs", feed.name, self.interval_s)

    def _stop_runner(self, name: str, *, close: bool) -> None:
        runner = self._runners.pop(name)
        runner.stop_event.set()
        if close:
            # The runner may be mid-tick; close() waits for it (the translator's lock).
            threading.Thread(target=runner.translator.close, daemon=True).start()
        log.info("feed %s: consumer group translation stopped", name)

    def _drop_unused_tails(self) -> None:
        self._taken = [t for t in self._taken if not t.closed]
        users = [r.translator for r in self._runners.values()] + self._taken
        targets = {str(t.feed.sink.cluster) for t in users}
        sources = {t.feed.source for t in users}
        tails: list[Follower[Any]] = []
        for alias in [a for a in self._syncs if a not in targets]:
            tails.append(self._syncs.pop(alias))
        for alias in [a for a in self._stamps if a not in sources]:
            tails.append(self._stamps.pop(alias))
        for tail in tails:
            threading.Thread(target=tail.stop, daemon=True).start()
