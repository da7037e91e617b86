"""The pure arithmetic of the CDC benchmark (``crossfeed bench --only cdc``): how a
target's polled rows become an apply rate and commit→visible lags, and how the two
sides are judged against the issue's goals. No I/O here (unit-tested)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crossfeed.bench.measure import percentiles, rounded

ROWS_PER_TRANSFER = 3  # two account updates and one ledger insert, one transaction
GOAL_OF_NATIVE = 0.5  # crossfeed's apply rate at least half of native logical replication's
GOAL_LAG_P99_MS = 2000.0  # commit→visible p99 at half load


def apply_rate(transfers: int, first_at: float, last_at: float) -> dict[str, float]:
    """Rows and transactions per second from the first backlog transfer visible on the
    target to the last (monotonic seconds)."""
    seconds = max(last_at - first_at, 1e-3)
    return {
        "seconds": round(seconds, 2),
        "rows_per_s": round(transfers * ROWS_PER_TRANSFER / seconds, 1),
        "transactions_per_s": round(transfers / seconds, 1),
    }


def capture_rate(transfers: int, seconds: float) -> dict[str, float]:
    """Debezium's rate: the backlog's rows published to Kafka per second, from the first
    transfer written to the last END record on the transaction topic."""
    return {"capture_rows_per_s": round(transfers * ROWS_PER_TRANSFER / max(seconds, 1e-3), 1)}


def cpu_per_row(cost: dict[str, dict[str, float]], transfers: int) -> dict[str, Any]:
    """CPU milliseconds per row applied from the backlog, of every process in ``cost``
    (ProcessCost.finish with the apply window) and per process."""
    rows = max(transfers * ROWS_PER_TRANSFER, 1)
    per = {
        label: round(figures.get("cpu_window_s", 0.0) * 1000 / rows, 4)
        for label, figures in cost.items()
    }
    return {"cpu_ms_per_row": round(sum(per.values()), 4), "cpu_ms_per_row_by_process": per}


def half_load(rows_per_s: float) -> float:
    """Transactions/s for the lag phase: half the measured apply rate."""
    return max(rows_per_s / ROWS_PER_TRANSFER / 2, 1.0)


@dataclass
class LagBook:
    """Ledger rows seen on the target, each once: its ``at`` (epoch s, written on the
    source inside its transaction) against the moment a poller first saw it.

    Ids come from a sequence, so concurrent sessions commit them slightly out of order:
    the poller asks for ids above ``floor`` (the highest seen minus ``window``) and the
    book drops those it has."""

    after_id: int = 0  # only rows above this count (the lag phase's, not the backlog's)
    window: int = 1000
    seen: set[int] = field(default_factory=set)
    lags_ms: list[float] = field(default_factory=list)
    highest: int = 0

    @property
    def floor(self) -> int:
        return max(self.after_id, self.highest - self.window)

    def add(self, rows: list[tuple[int, float]], seen_at: float) -> int:
        """Rows ``(id, at)`` polled at ``seen_at`` (epoch s); returns how many were new."""
        new = 0
        for row_id, at in rows:
            if row_id <= self.after_id or row_id in self.seen:
                continue
            self.seen.add(row_id)
            self.highest = max(self.highest, row_id)
            self.lags_ms.append(max(0.0, (seen_at - at) * 1000))
            new += 1
        return new

    def summary(self) -> dict[str, Any]:
        """p50/p99/max, and the median of the first and last quarter of the rows in the
        order they were seen: a lag that grows through the phase means the side does not
        keep up with the rate (a backlog builds), a flat one is its latency."""
        lags = percentiles(self.lags_ms)
        quarter = max(1, len(self.lags_ms) // 4)
        first, last = self.lags_ms[:quarter], self.lags_ms[-quarter:]
        return {
            "rows": len(self.lags_ms),
            "lag_ms": rounded(lags),
            "p50_first_quarter_ms": _median(first),
            "p50_last_quarter_ms": _median(last),
        }


def _median(values: list[float]) -> float | None:
    return round(sorted(values)[len(values) // 2], 1) if values else None


def goals(crossfeed: dict[str, Any], native: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals against what was measured (None where a side has no figure)."""
    out: dict[str, Any] = {
        "of_native_goal": GOAL_OF_NATIVE,
        "lag_p99_goal_ms": GOAL_LAG_P99_MS,
        "of_native": None,
        "of_native_met": None,
        "lag_p99_met": None,
    }
    ours, theirs = crossfeed.get("rows_per_s"), native.get("rows_per_s")
    if ours and theirs:
        out["of_native"] = round(ours / theirs, 3)
        out["of_native_met"] = out["of_native"] >= GOAL_OF_NATIVE
    p99 = (crossfeed.get("lag") or {}).get("lag_ms", {}).get("p99")
    if p99 is not None:
        out["lag_p99_met"] = p99 < GOAL_LAG_P99_MS
    return out
