"""How long a cluster has been out of reach: decisions only, no I/O (times passed in).

Counted from the first contact that failed, not from the last one that succeeded: a
process that asks only now and then (the coordinator reads its state when a client
calls) may have succeeded long before the cluster stopped answering, and the time since
that success says nothing about the outage. A contact that succeeds ends the outage.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outage:
    since: float | None = None  # when the first failed contact began (None: answering)

    def failed(self, began_at: float) -> None:
        """A contact begun at ``began_at`` got no answer."""
        if self.since is None:
            self.since = began_at

    def answered(self) -> None:
        self.since = None

    def lasted(self, now: float) -> float:
        """Seconds out of reach at ``now`` (0 while answering)."""
        return 0.0 if self.since is None else max(0.0, now - self.since)
