"""A quiet feed's pause between micro-batches, cut short by the first change.

A feed whose source sends nothing but resolved marks still gets a micro-batch from every
puller commit (a task commits its marks every ``puller.resolved_interval_ms``), and a
micro-batch costs the sorter's JVM ~0.15 CPU-s whatever it holds: about a sixth of a core
per quiet feed. After a batch that read no change and left none pending, the sorter waits
(``sorter.quiet_pause_ms``) before the batch's call returns to Spark — its state saved, its
report out — so Spark starts the next batch later and reads the marks of the pause in one.
Meanwhile :class:`QuietWatch` reads `.changes` from where the batch ended, and the first
record that is not a resolved mark ends the pause at once. A change therefore waits for no
pause: only R moves less often while nothing happens (and the resolved mark the sinks see
with it).

Where the batch ended comes from Spark's own offset log (offset_log.py); if it cannot be
read, there is no pause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from crossfeed.kafka import clients
from crossfeed.services.sorter.offset_log import batch_end
from crossfeed.wire import headers, ids, topics

log = logging.getLogger(__name__)

POLL_S = 0.5
"""Longest one read blocks: how soon a stop is seen."""


def is_mark(record_headers: Any) -> bool:
    """Whether a `.changes` record is a resolved mark (its first ``crossfeed-type``);
    ``record_headers`` as the consumer gives them: (name, bytes) pairs, or None."""
    for name, value in record_headers or ():
        if name == headers.TYPE:
            return bool(value == headers.TYPE_RESOLVED.encode())
    return False


class QuietWatch:
    """Waits, between two micro-batches of a quiet feed, until a change arrives."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        feed: str,
        offsets_dir: Path,
        stop: threading.Event,
    ) -> None:
        self.conf, self.offsets_dir, self.stop = conf, offsets_dir, stop
        self.topic, self.group = topics.changes(feed), ids.sorter_quiet_group(feed)
        self._consumer: Consumer | None = None

    def wait(self, batch_id: int, seconds: float) -> str:
        """Up to ``seconds``, until a change follows batch ``batch_id`` in `.changes` or
        the sorter stops; says which ended it: ``change``, ``pause over``, ``stopping``, or
        ``no offsets`` (no pause: the batch's end is unknown)."""
        ends = batch_end(self.offsets_dir, batch_id, self.topic)
        if ends is None:
            return "no offsets"
        consumer = self._reader()
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in ends.items()])
        try:
            deadline = time.monotonic() + seconds
            while not self.stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return "pause over"
                for msg in consumer.consume(100, timeout=min(left, POLL_S)):
                    if msg.error() is None and not is_mark(msg.headers()):
                        return "change"
            return "stopping"
        finally:
            consumer.unassign()

    def _reader(self) -> Consumer:
        if self._consumer is None:
            # Assigned, never subscribed: the group joins nothing and nothing is committed
            # (positions come from the offset log each time). A fetch returns as soon as a
            # record arrives, so the client's fetch wait only paces empty answers.
            self._consumer = clients.consumer(self.conf, **{"group.id": self.group})
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
