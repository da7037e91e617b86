"""Histogram buckets the services share (seconds)."""

from __future__ import annotations

from typing import Final

COMMIT: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""A transaction commit: milliseconds on a healthy cluster, up to the client's minute
while it waits out a broker failure."""
