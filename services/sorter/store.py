"""The sorter's files: driver state per batch id, pending segments, one lock per feed.

Everything lives under the feed's checkpoint directory::

    <checkpoint_dir>/<feed>/spark/       Structured Streaming's offsets and commits
    <checkpoint_dir>/<feed>/state/N.json driver state after batch N (rules.DriverState)
    <checkpoint_dir>/<feed>/pending/     parquet segments of rows not yet released
    <checkpoint_dir>/<feed>/lock         held by the running sorter (one per feed)

A state file is written to a temporary name, fsynced and renamed over, so a kill -9 leaves
either the old or the new file, never half of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import IO

from crossfeed.services.sorter.rules import DriverState

KEEP_STATES = 5


class FeedLocked(RuntimeError):
    """Another sorter holds the feed's checkpoint directory."""


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.spark_dir = root / "spark"
        self.state_dir = root / "state"
        self.pending_dir = root / "pending"
        self._lock: IO[str] | None = None

    def open(self) -> Store:
        for d in (self.state_dir, self.pending_dir):
            d.mkdir(parents=True, exist_ok=True)
        lock = open(self.root / "lock", "a+")  # noqa: SIM115 - held for the process' life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise FeedLocked(
                f"another sorter is running with {self.root} (one sorter per feed; "
                "scale it with Spark executors)"
            ) from None
        self._lock = lock
        return self

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- driver state ---------------------------------------------------------------------

    def _batches(self) -> list[int]:
        out = []
        for path in self.state_dir.glob("*.json"):
            with contextlib.suppress(ValueError):
                out.append(int(path.stem))
        return sorted(out)

    def load_before(self, batch_id: int) -> DriverState:
        """The state saved by the newest batch before ``batch_id`` (empty if none)."""
        for bid in reversed(self._batches()):
            if bid < batch_id:
                data = json.loads((self.state_dir / f"{bid}.json").read_text())
                return DriverState.from_dict(data)
        return DriverState()

    def latest(self) -> DriverState:
        return self.load_before(2**62)

    def save(self, state: DriverState) -> None:
        path = self.state_dir / f"{state.batch_id}.json"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump(state.as_dict(), out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        for bid in self._batches()[:-KEEP_STATES]:
            with contextlib.suppress(OSError):
                (self.state_dir / f"{bid}.json").unlink()

    # -- segments -------------------------------------------------------------------------

    def segment_path(self, name: str) -> str:
        return str(self.pending_dir / name)

    def delete_segments(self, names: list[str]) -> None:
        for name in names:
            shutil.rmtree(self.pending_dir / name, ignore_errors=True)
