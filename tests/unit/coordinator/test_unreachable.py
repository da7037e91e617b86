"""How long the coordinator says its control cluster has been unreachable: from the first
failed contact, not from its last good read of the state (which may be long before)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.outage import Outage
from crossfeed.services.coordinator.store import StateStore

pytestmark = pytest.mark.unit


def test_an_outage_counts_from_the_first_failed_contact():
    outage = Outage()
    assert outage.lasted(100.0) == 0.0
    outage.failed(130.0)  # the last success was at 100: it does not count
    outage.failed(132.0)
    assert outage.lasted(132.5) == 2.5
    outage.answered()
    assert outage.lasted(140.0) == 0.0
    outage.failed(150.0)  # a new outage starts over
    assert outage.lasted(151.0) == 1.0


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 10)), max_size=30))
def test_an_outage_never_exceeds_the_time_since_its_first_failure(steps):
    outage, now, first_failure = Outage(), 0.0, None
    for ok, step in steps:
        now += step
        if ok:
            outage.answered()
            first_failure = None
        else:
            outage.failed(now)
            first_failure = now if first_failure is None else first_failure
        expected = 0.0 if first_failure is None else now + 1 - first_failure
        assert outage.lasted(now + 1) == expected


def test_the_store_counts_from_its_first_failed_sync_not_its_creation():
    """A cluster nothing answers on: the store was made (its last "good" moment) 2 s
    before anyone asked, and the first sync fails within ~1 s. The outage is that ~1 s."""
    store = StateStore({"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 1000})
    time.sleep(2.0)
    asked = time.monotonic()
    assert not store.sync(0.5)
    assert store.sync_error
    assert 0.0 < store.unreachable_for() <= time.monotonic() - asked + 0.1
