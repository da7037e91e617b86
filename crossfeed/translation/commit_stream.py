"""Group commits as a stream: one feed's tail of the source's ``__consumer_offsets``.

The tail keeps each wanted group partition's latest commit (``commit_log.py``) and wakes a
thread of its own on every batch read, which has the translator translate and write what
changed (``Translator.translate_arrivals``) — within ~100 ms of the commit, with no admin
request per group. Where the topic cannot be read, :meth:`CommitStream.mode` says why and
the translator polls instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from crossfeed.translation.commit_log import Commit, CommitBook, commit_mode
from crossfeed.translation.follow import Follower, follow_commits
from crossfeed.translation.kafka_io import TP
from crossfeed.translation.latest import COMMIT_LOG, Known
from crossfeed.translation.source import Where

log = logging.getLogger(__name__)


def known(commit: Commit) -> Known:
    """A commit read from the log is known as of its commit time (broker clock): the
    consumer-timestamp merge compares that with the commits the wrapper recorded."""
    return Known(commit.offset, commit.committed_at_ms, commit.committed_at_ms, COMMIT_LOG)


class CommitStream:
    """The commit log of one feed's groups and topics, and the thread that hands on what
    arrives; ``enabled`` false: never followed (the translator always polls)."""

    def __init__(
        self,
        feed_name: str,
        source_conf: dict[str, Any],
        group_filter: Callable[[str], bool],
        wanted: Callable[[str], bool],
        *,
        enabled: bool,
        topic: str | None,
    ) -> None:
        self.feed_name = feed_name
        self.source_conf = source_conf
        self.group_filter = group_filter
        self.wanted = wanted
        self.enabled = enabled
        self.topic = topic
        self._commits: Follower[CommitBook] | None = None
        self._arrived = threading.Event()
        self._arrivals: threading.Thread | None = None
        self._stopped = False

    def start(self, translate: Callable[[], int]) -> None:
        """Follow the log and call ``translate`` after each batch read; idempotent."""
        if not self.enabled or self._commits is not None:
            return
        # Per feed, not shared: the book keeps only this feed's groups and topics.
        book = CommitBook(self.group_filter, self.wanted)
        extra = {"topic": self.topic} if self.topic else {}
        self._commits = follow_commits(self.source_conf, book, self._arrived.set, **extra)
        self._arrivals = threading.Thread(
            target=self._follow_arrivals,
            args=(translate,),
            name=f"commits-{self.feed_name}",
            daemon=True,
        )
        self._arrivals.start()

    def stop(self) -> None:
        self._stopped = True
        if self._commits is not None:
            self._commits.stop()
        self._arrived.set()  # the arrivals thread sees _stopped and ends

    def mode(self) -> tuple[bool, str]:
        """Whether commits stream now, and how they reach the translator: ``stream`` or
        ``poll (why)``."""
        if self._commits is None:
            return False, "poll (stream off)" if not self.enabled else "poll (not started)"
        return commit_mode(self._commits.caught_up.is_set(), self._commits.problem)

    @property
    def read_at_ms(self) -> int:
        """When the log was last read (-1: not followed); its commits are known until then."""
        return self._commits.read_at_ms if self._commits is not None else -1

    def positions(self) -> dict[str, dict[TP, Known]]:
        """Every wanted group's position, as the log has it now (a round translates them
        all, so the changes pending for the arrivals thread are taken)."""
        assert self._commits is not None
        with self._commits.locked() as book:
            book.take_changed()
            latest = book.items()
        positions: dict[str, dict[TP, Known]] = {}
        for (group, topic, partition), commit in latest:
            positions.setdefault(group, {})[(topic, partition)] = known(commit)
        return positions

    def take_changed(self) -> dict[Where, Commit | None]:
        """The commits read since last taken (None: the group partition's was deleted);
        nothing until the log was read to its end."""
        commits = self._commits
        if commits is None or not self.mode()[0]:
            return {}
        with commits.locked() as book:
            return book.take_changed()

    def _follow_arrivals(self, translate: Callable[[], int]) -> None:
        while not self._stopped:
            self._arrived.wait()
            self._arrived.clear()
            if self._stopped:
                return
            try:
                translate()
            except Exception:  # the next batch, or the next tick, tries again
                log.exception("feed %s: translating new commits failed", self.feed_name)
