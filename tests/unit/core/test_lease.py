"""Unit and property tests for crossfeed.core.lease."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.lease import (
    LeaseAction,
    LeaseView,
    LivenessTracker,
    accept_write,
    decide,
    holds_lease,
    is_fenced,
)

pytestmark = pytest.mark.unit

TTL = 10_000


class TestLeaseView:
    def test_expiry_is_exclusive(self) -> None:
        view = LeaseView("a", 1, 1000, TTL)
        assert view.expires_at_ms == 11_000
        assert view.is_live(10_999)
        assert not view.is_live(11_000)

    @pytest.mark.parametrize(("holder", "epoch", "ttl"), [("", 1, 1), ("a", 0, 1), ("a", 1, 0)])
    def test_validation(self, holder: str, epoch: int, ttl: int) -> None:
        with pytest.raises(ValueError):
            LeaseView(holder, epoch, 0, ttl)


class TestDecide:
    def test_no_lease_acquires_epoch_1(self) -> None:
        decision = decide(None, "a", 500, TTL)
        assert decision.action is LeaseAction.ACQUIRE
        assert decision.proposed == LeaseView("a", 1, 500, TTL)
        assert decision.epoch == 1 and decision.holder == "a"
        assert "acquire epoch 1" in decision.reason

    def test_holder_renews_same_epoch(self) -> None:
        decision = decide(LeaseView("a", 4, 1000, TTL), "a", 5000, TTL)
        assert decision.action is LeaseAction.RENEW
        assert decision.proposed == LeaseView("a", 4, 5000, TTL)
        assert decision.reason == "renew epoch 4: 6000 ms were left"

    def test_other_holder_followed(self) -> None:
        decision = decide(LeaseView("b", 4, 1000, TTL), "a", 5000, TTL)
        assert decision.action is LeaseAction.FOLLOW
        assert decision.proposed is None
        assert decision.holder == "b" and decision.epoch == 4
        assert "follow b (epoch 4)" in decision.reason

    def test_expired_lease_acquired_at_next_epoch(self) -> None:
        decision = decide(LeaseView("b", 4, 1000, TTL), "a", 13_500, TTL)
        assert decision.action is LeaseAction.ACQUIRE
        assert decision.proposed == LeaseView("a", 5, 13_500, TTL)
        assert decision.reason == "acquire epoch 5: lease of b (epoch 4) expired 2500 ms ago"

    def test_own_expired_lease_needs_new_epoch(self) -> None:
        decision = decide(LeaseView("a", 4, 1000, TTL), "a", 11_000, TTL)
        assert decision.action is LeaseAction.ACQUIRE
        assert decision.epoch == 5


class TestAcceptWrite:
    current = LeaseView("a", 3, 1000, TTL)

    def test_first_acquire_needs_epoch_1(self) -> None:
        assert accept_write(None, LeaseView("a", 1, 0, TTL))
        assert not accept_write(None, LeaseView("a", 2, 0, TTL))

    def test_renew_by_holder(self) -> None:
        assert accept_write(self.current, LeaseView("a", 3, 5000, TTL))

    def test_renew_by_other_refused(self) -> None:
        assert not accept_write(self.current, LeaseView("b", 3, 5000, TTL))

    def test_renew_backwards_in_time_refused(self) -> None:
        assert not accept_write(self.current, LeaseView("a", 3, 999, TTL))

    def test_renew_of_expired_lease_refused(self) -> None:
        assert not accept_write(self.current, LeaseView("a", 3, 11_000, TTL))

    def test_acquire_of_live_lease_refused(self) -> None:
        assert not accept_write(self.current, LeaseView("b", 4, 10_999, TTL))

    def test_acquire_of_expired_lease(self) -> None:
        assert accept_write(self.current, LeaseView("b", 4, 11_000, TTL))

    def test_holder_may_reacquire_early(self) -> None:
        assert accept_write(self.current, LeaseView("a", 4, 2000, TTL))

    @pytest.mark.parametrize("epoch", [1, 2, 5, 9])
    def test_wrong_epochs_refused(self, epoch: int) -> None:
        assert not accept_write(self.current, LeaseView("b", epoch, 50_000, TTL))


def test_holds_lease() -> None:
    view = LeaseView("a", 1, 0, TTL)
    assert holds_lease(view, "a", TTL - 1)
    assert not holds_lease(view, "a", TTL)
    assert not holds_lease(view, "b", 0)
    assert not holds_lease(None, "a", 0)


@pytest.mark.parametrize(
    ("command", "current", "fenced"), [(3, 4, True), (4, 4, False), (5, 4, False), (0, 1, True)]
)
def test_is_fenced(command: int, current: int, fenced: bool) -> None:
    assert is_fenced(command, current) is fenced


# --- simulation: no two leaders -----------------------------------------------------------

CANDIDATES = ["a", "b", "c"]

steps_st = st.lists(
    st.tuples(
        st.sampled_from(CANDIDATES),  # who acts
        st.integers(0, 6_000),  # time passing before it acts
        st.booleans(),  # does it re-read the topic first (else it acts on a stale view)
        st.integers(1, 3 * TTL),  # the ttl it asks for
    ),
    max_size=60,
)


Step = tuple[str, int, bool, int]
Accept = Callable[[LeaseView | None, LeaseView], bool]


def _simulate(steps: list[Step], accept: Accept) -> list[str]:
    """Run candidates against a last-write-wins topic guarded by ``accept``; return the
    invariant violations seen (empty when the lease rules hold)."""
    log: LeaseView | None = None  # the topic, folded with accept in log order
    views: dict[str, LeaseView | None] = dict.fromkeys(CANDIDATES)
    mine: dict[str, LeaseView | None] = dict.fromkeys(CANDIDATES)  # my last accepted write
    holders_by_epoch: dict[int, str] = {}
    violations: list[str] = []
    now = 0
    for who, elapsed, refresh, ttl in steps:
        now += elapsed
        if refresh:
            views[who] = log
        decision = decide(views[who], who, now, ttl)
        if decision.proposed is not None:
            if accept(log, decision.proposed):
                if log is not None and decision.proposed.epoch < log.epoch:
                    violations.append(f"epoch went back at {now}")
                log = decision.proposed
                mine[who] = log
            views[who] = log  # it reads the topic back after writing
        if log is not None and holders_by_epoch.setdefault(log.epoch, log.holder) != log.holder:
            violations.append(f"two holders of epoch {log.epoch}")
        leaders = [c for c in CANDIDATES if holds_lease(mine[c], c, now)]
        if len(leaders) > 1:
            violations.append(f"two live leaders at {now}: {leaders}")
        if leaders and (log is None or log.holder != leaders[0]):
            violations.append(f"{leaders[0]} leads at {now} but the topic says {log}")
    return violations


@given(steps_st)
def test_never_two_live_holders_in_any_interleaving(steps: list[Step]) -> None:
    assert _simulate(steps, accept_write) == []


def test_simulation_catches_a_rule_without_the_expiry_check() -> None:
    """Guards the simulation against being too weak: a naive rule that lets any
    ``epoch + 1`` write win makes two leaders when a candidate acts on a stale view."""

    def naive(current: LeaseView | None, proposed: LeaseView) -> bool:
        if proposed.epoch == (current.epoch if current else 0) + 1:
            return True
        return accept_write(current, proposed)

    steps: list[Step] = [
        ("a", 0, True, TTL),  # a acquires epoch 1 at 0
        ("b", 100, True, TTL),  # b sees it and follows
        ("a", 8_900, True, TTL),  # a renews at 9 s
        ("b", 1_500, False, TTL),  # b, on its stale view, thinks the lease expired at 10 s
    ]
    assert _simulate(steps, accept_write) == []
    assert "two live leaders at 10500: ['a', 'b']" in _simulate(steps, naive)


# --- liveness -----------------------------------------------------------------------------


class TestLivenessTracker:
    def test_alive_and_expired(self) -> None:
        tracker = LivenessTracker()
        tracker.heartbeat("p1", sent_at_ms=0, received_at_ms=100)
        tracker.heartbeat("p2", sent_at_ms=0, received_at_ms=5_000)
        assert tracker.alive(10_100, 10_000) == ["p1", "p2"]
        assert tracker.expired(10_100, 10_000) == []
        assert tracker.expired(10_101, 10_000) == ["p1"]
        assert tracker.alive(10_101, 10_000) == ["p2"]
        assert tracker.age_ms("p1", 10_101) == 10_001
        assert tracker.age_ms("unknown", 0) is None

    def test_newer_heartbeat_refreshes(self) -> None:
        tracker = LivenessTracker()
        tracker.heartbeat("p1", sent_at_ms=0, received_at_ms=0)
        assert tracker.heartbeat("p1", sent_at_ms=9_000, received_at_ms=9_000)
        assert tracker.expired(15_000, 10_000) == []

    def test_stale_heartbeat_ignored(self) -> None:
        tracker = LivenessTracker()
        tracker.heartbeat("p1", sent_at_ms=5_000, received_at_ms=5_000)
        assert not tracker.heartbeat("p1", sent_at_ms=4_000, received_at_ms=14_000)
        assert tracker.expired(15_001, 10_000) == ["p1"]

    def test_graceful_leave_is_immediate(self) -> None:
        tracker = LivenessTracker()
        tracker.heartbeat("p1", sent_at_ms=1_000, received_at_ms=1_000)
        tracker.leave("p1", sent_at_ms=2_000)
        assert tracker.alive(2_000, 10_000) == []
        assert tracker.expired(99_999, 10_000) == []
        assert tracker.instances() == []

    def test_late_heartbeat_does_not_resurrect_but_a_new_one_does(self) -> None:
        tracker = LivenessTracker()
        tracker.leave("p1", sent_at_ms=2_000)
        assert not tracker.heartbeat("p1", sent_at_ms=1_500, received_at_ms=3_000)
        assert tracker.instances() == []
        assert tracker.heartbeat("p1", sent_at_ms=2_500, received_at_ms=3_000)
        assert tracker.instances() == ["p1"]

    def test_forget(self) -> None:
        tracker = LivenessTracker()
        tracker.heartbeat("p1", sent_at_ms=0, received_at_ms=0)
        tracker.forget("p1")
        assert tracker.instances() == []


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["p1", "p2", "p3"]), st.integers(0, 100_000), st.integers(0, 100_000)
        ),
        max_size=30,
    ),
    st.integers(0, 200_000),
    st.integers(0, 50_000),
)
def test_alive_and_expired_partition_the_known_instances(
    beats: list[tuple[str, int, int]], now: int, timeout: int
) -> None:
    tracker = LivenessTracker()
    latest: dict[str, tuple[int, int]] = {}
    for instance, sent, received in beats:
        tracker.heartbeat(instance, sent_at_ms=sent, received_at_ms=received)
        if instance not in latest or sent > latest[instance][0]:
            latest[instance] = (sent, received)
    alive = set(tracker.alive(now, timeout))
    expired = set(tracker.expired(now, timeout))
    assert alive | expired == set(tracker.instances()) == set(latest)
    assert not alive & expired
    for instance, (_, received) in latest.items():
        assert (instance in expired) == (now - received > timeout)
