"""Folding _crossfeed.state records (no Kafka): the lease, epochs, compaction."""

from __future__ import annotations

import pytest

from crossfeed.core.lease import LeaseView
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.fold import StateFold
from crossfeed.services.coordinator.records import (
    LEASE_KEY,
    Assignment,
    FeedStatus,
    Lease,
    StoredFeed,
    feed_key,
    status_key,
)

pytestmark = pytest.mark.unit

TTL = 2000


def lease(holder: str, epoch: int, at: int, ttl: int = TTL) -> bytes:
    return Lease(LeaseView(holder, epoch, at, ttl), at).encode()


def assignment(instance: str, epoch: int, tasks: set[int], generation: int = 1) -> Assignment:
    return Assignment("orders", "puller", instance, epoch, generation, frozenset(tasks))


def test_lease_records_fold_like_core_lease() -> None:
    fold = StateFold()
    fold.apply(LEASE_KEY, lease("a", 1, 0))
    fold.apply(LEASE_KEY, lease("b", 2, 500))  # a's lease is live: rejected
    fold.apply(LEASE_KEY, lease("a", 1, 1000))  # renewal
    assert fold.view().lease is not None
    assert (fold.view().lease.view.holder, fold.view().lease.view.renewed_at_ms) == ("a", 1000)
    fold.apply(LEASE_KEY, lease("b", 2, 5000))  # expired: b takes over
    assert fold.view().lease.view.holder == "b"  # type: ignore[union-attr]


def test_after_compaction_the_first_lease_record_read_is_the_start() -> None:
    fold = StateFold()
    fold.apply(LEASE_KEY, lease("c", 41, 9000))  # its predecessors were compacted away
    view = fold.view().lease
    assert view is not None and (view.view.holder, view.view.epoch) == ("c", 41)


def test_writes_below_the_lease_epoch_read_so_far_are_ignored() -> None:
    fold = StateFold()
    old = assignment("p1", 3, {0, 1})
    fold.apply(old.key, old.encode())  # before any lease record: accepted (compaction)
    fold.apply(LEASE_KEY, lease("b", 4, 0))
    late = assignment("p1", 3, set(), generation=2)
    fold.apply(late.key, late.encode())
    stale = FeedStatus("orders", "paused", leader_epoch=3)
    fold.apply(status_key("orders"), stale.encode())
    view = fold.view()
    assert view.assignments["orders"]["p1"] == old
    assert "orders" not in view.statuses
    fresh = assignment("p1", 4, {0}, generation=3)
    fold.apply(fresh.key, fresh.encode())
    assert fold.view().assignments["orders"]["p1"] == fresh


def test_feeds_and_tombstones() -> None:
    spec = FeedSpec.model_validate(
        {"name": "orders", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["o.*"],
         "config": {"staging.partitions": "4"}}
    )  # fmt: skip
    fold = StateFold()
    fold.apply(feed_key("orders"), StoredFeed(spec, 123).encode())
    stored = fold.view().feeds["orders"]
    assert stored.created_at_ms == 123
    assert stored.spec.config.staging_partitions == 4
    assert stored.record()["config"] == {"staging.partitions": "4"}
    a = assignment("p1", 1, {0})
    fold.apply(a.key, a.encode())
    fold.apply(a.key, None)
    fold.apply(feed_key("orders"), None)
    assert fold.view().feeds == {} and fold.view().assignments["orders"] == {}


def test_unknown_keys_are_skipped_and_bad_values_raise() -> None:
    fold = StateFold()
    fold.apply("translation/whatever", b"anything")
    with pytest.raises(ValueError):
        fold.apply(status_key("orders"), b"not avro")
