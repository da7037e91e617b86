"""Which `.changes` records end a quiet pause (services/sorter/quiet.py): anything but a
resolved mark. The pause itself, woken by a change, against a real sorter:
tests/integration/test_sorter.py."""

from __future__ import annotations

import pytest

from crossfeed.services.sorter.quiet import is_mark
from crossfeed.wire import headers, records

pytestmark = pytest.mark.unit


def test_marks_and_changes_told_apart():
    assert is_mark(records.resolved_mark_headers(123))
    assert not is_mark([(headers.COMMIT_TS, b"1"), (headers.TXN, b"t:1:1")])
    assert not is_mark(None)
    assert not is_mark([(headers.TYPE, b"something-else")])
