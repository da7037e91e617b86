"""Which of a group partition's known commits a translation starts from (no I/O).

A translator learns a group's commits on the source from up to four places:

* the source itself — listed by an admin request, or read from its ``__consumer_offsets``
  (the commit log) — the truth while the source answers;
* ``__consumer_timestamps`` on the source, which the client library's
  ``TimestampedConsumer`` writes after each commit (read as long as the source answered);
* ``_crossfeed.consumer-timestamps`` on the *destination*, where a ``TimestampedConsumer``
  with the opt-in (``timestamps.destination.*``) also records each commit before
  ``commit()`` returns — the only one of the four that survives a source killed for good
  with its last commits;
* checkpoints the translator wrote before (after a restart).

The rule, per group partition (:func:`latest`):

1. While the source answers, what it says wins (listed or from its commit log): the
   recorded commits are copies of what it holds, never newer.
2. Otherwise the newest by time wins: a recorded commit made (``committed_at_ms``) after
   the time up to which the source's answer was true (``seen_at_ms``) replaces it.
3. A commit recorded on the destination at the same offset as the winner confirms it:
   the winner is reported as known from the destination. A client and a broker clock
   that disagree by a few milliseconds must not turn "the group's last commit" into
   "an older commit" when both say the same offset.
4. A winner from the source *past* every commit recorded on the destination (learnt after
   them all, or rule 2 would have chosen one) is past the group's last acknowledged commit: with
   the opt-in each commit the client saw succeed is on the destination before
   ``commit()`` returns, so a newer one the source holds is a commit whose answer was
   lost with the source (the client took it for failed). Nothing the client knows it
   committed is read again from there: the winner is marked ``past_recorded``.

Times are epoch ms from different clocks (broker, client); a skew between them can only
pick a commit made within the skew of another, and the group's commits come from one
client at a time, so the one picked is at worst the one before — records read again,
never skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

LISTED: Final = "listed"
COMMIT_LOG: Final = "commit-log"
SOURCE_TIMESTAMPS: Final = "consumer-timestamps"
ON_DESTINATION: Final = "destination-timestamps"
"""Recorded on the destination by the opt-in: the consumer's last commit even when the
source never answers again."""
CHECKPOINT: Final = "checkpoint"


@dataclass(frozen=True, slots=True)
class Known:
    """A committed offset and when it was learnt (ms)."""

    offset: int
    seen_at_ms: int
    committed_at_ms: int = -1
    """When the commit was made, where that is known (commit log, consumer timestamps)."""
    via: str = LISTED
    """listed, commit-log, consumer-timestamps, destination-timestamps or checkpoint (the
    failover report's ``known_from``)."""
    past_recorded: bool = False
    """At or past every commit recorded on the destination (rule 4)."""


def latest(
    from_source: Known | None,
    recorded: Iterable[Known],
    *,
    source_up: bool,
) -> Known | None:
    """The commit to translate (see the module docstring): ``from_source`` is what the
    source said last (listed, its commit log, or a checkpoint), ``recorded`` the commits
    the client library recorded (on the source or the destination)."""
    if source_up:
        return from_source
    best = from_source
    candidates = sorted(recorded, key=lambda k: (k.committed_at_ms, k.offset))
    for known in candidates:
        if best is None or known.committed_at_ms > best.seen_at_ms:
            best = known
    if best is None or best.via == ON_DESTINATION:
        return best
    on_destination = [k for k in candidates if k.via == ON_DESTINATION]
    for known in on_destination:
        if known.offset == best.offset:
            return known
    if on_destination and all(best.offset > k.offset for k in on_destination):
        return replace(best, past_recorded=True)
    return best
