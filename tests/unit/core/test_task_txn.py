"""The puller task's transaction machine (crossfeed/core/task_txn.py): unit tests of each
decision, and a property test that drives it against a model of Kafka — a source log, a
target with transactions and fencing — through arbitrary failures and checks that every
source record lands exactly once, in order."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.core.task_txn import Decision, Limits, Next, Outcome, Phase, TaskTxn

LIMITS = Limits(max_records=3, max_bytes=1000, marks_interval_s=1.0)


def fresh(**offsets: int) -> TaskTxn[str]:
    txn: TaskTxn[str] = TaskTxn(LIMITS)
    for p, o in offsets.items():
        txn.add_partition(p, o)
    return txn


# -- decisions one by one ------------------------------------------------------------


def test_a_record_before_the_position_is_a_refetch_and_skipped() -> None:
    txn = fresh(a=5)
    assert not txn.take("a", 4, 10, now=0.0)
    assert txn.phase is Phase.IDLE
    assert txn.take("a", 5, 10, now=0.0)
    assert not txn.take("a", 5, 10, now=0.0)
    assert txn.next == {"a": 6}
    assert txn.phase is Phase.OPEN


def test_due_by_records_bytes_or_age() -> None:
    txn = fresh(a=0)
    txn.take("a", 0, 10, now=10.0)
    assert not txn.due(10.0, interval_s=0.1)
    assert txn.due_in(10.05, 0.1) == pytest.approx(0.05)
    assert txn.due(10.1, interval_s=0.1)  # by age
    txn.take("a", 1, 10, now=10.0)
    txn.take("a", 2, 10, now=10.0)
    assert txn.due(10.0, interval_s=5.0)  # by records (max 3)
    big = fresh(b=0)
    big.take("b", 0, 1000, now=0.0)
    assert big.due(0.0, interval_s=5.0)  # by bytes


def test_idle_task_commits_marks_at_the_marks_interval() -> None:
    txn = fresh(a=0)
    txn.last_commit = 100.0
    assert not txn.due(100.5, 0.1)
    assert txn.due(101.0, 0.1)
    assert fresh().due(1000.0, 0.1) is False  # no partitions: no marks to write


def test_positions_skipped_over_are_carried_by_the_marks() -> None:
    txn = fresh(a=0)
    txn.skip_to("a", 7)  # aborted source transaction + its marker
    txn.skip_to("a", 3)  # never backwards
    assert txn.seal() == {"a": 7}


def test_nothing_is_sent_and_nothing_sealed_while_a_commit_is_under_way() -> None:
    txn = fresh(a=0)
    txn.take("a", 0, 1, now=0.0)
    assert txn.may_send()
    assert txn.seal() == {"a": 1}
    assert not txn.may_send()
    assert not txn.due(100.0, 0.0)
    with pytest.raises(RuntimeError):
        txn.seal()
    # Records read meanwhile belong to the next transaction.
    assert txn.take("a", 1, 1, now=1.0)
    assert txn.finished(Outcome.COMMITTED, now=2.0) == Decision(Next.GO_ON, "committed")
    assert txn.committed == {"a": 1}
    assert txn.phase is Phase.OPEN and txn.opened_at == 1.0 and txn.records == 1
    assert txn.seal() == {"a": 2}


def test_commit_with_nothing_held_goes_idle() -> None:
    txn = fresh(a=0)
    txn.take("a", 0, 1, now=0.0)
    txn.seal()
    txn.finished(Outcome.COMMITTED, now=1.0)
    assert txn.phase is Phase.IDLE and txn.last_commit == 1.0 and txn.due_in(1.0, 0.1) is None


def test_any_failure_ends_the_task_and_resumes_from_the_target() -> None:
    txn = fresh(a=0)
    txn.take("a", 0, 1, now=0.0)
    txn.seal()
    txn.finished(Outcome.COMMITTED, now=0.0)
    txn.take("a", 1, 1, now=0.0)
    txn.seal()
    decision = txn.finished(Outcome.FAILED, now=1.0, detail="request timed out")
    assert decision.next is Next.RESTART
    assert "request timed out" in decision.reason and "marks" in decision.reason
    assert decision.backoff_s == 0.0  # the first failure restarts at once
    assert txn.phase is Phase.DEAD
    assert txn.next == txn.sealed == txn.committed == {"a": 1}
    with pytest.raises(RuntimeError):
        txn.take("a", 1, 1, now=2.0)


def test_backoff_grows_with_failures_in_a_row_and_is_bounded() -> None:
    backoffs = []
    failures = 0
    for _ in range(12):
        txn = fresh(a=0)
        txn.failures = failures  # the restarted task carries the count on
        decision = txn.fail(Outcome.FAILED, "target away")
        failures = txn.failures
        backoffs.append(decision.backoff_s)
    assert backoffs[0] == 0.0
    assert backoffs[1:4] == [0.5, 1.0, 2.0]
    assert max(backoffs) == 10.0
    assert backoffs == sorted(backoffs)


def test_fenced_drops_the_task() -> None:
    txn = fresh(a=0)
    txn.take("a", 0, 1, now=0.0)
    decision = txn.fail(Outcome.FENCED, "PRODUCER_FENCED")
    assert decision.next is Next.DROP and "PRODUCER_FENCED" in decision.reason
    assert txn.failures == 0


def test_finished_without_a_commit_is_a_bug() -> None:
    with pytest.raises(RuntimeError):
        fresh(a=0).finished(Outcome.COMMITTED, now=0.0)
    with pytest.raises(ValueError):
        fresh(a=0).add_partition("a", 3)


# -- the machine against a model of Kafka --------------------------------------------


@dataclass
class Target:
    """A target cluster: committed copies per partition, the task's marks, and the one
    open transaction of the current producer epoch."""

    copies: dict[str, list[int]] = field(default_factory=dict)
    marks: dict[str, int] = field(default_factory=dict)
    open: list[tuple[str, int]] = field(default_factory=list)
    open_marks: dict[str, int] = field(default_factory=dict)

    def commit(self) -> None:
        for p, offset in self.open:
            self.copies.setdefault(p, []).append(offset)
        self.marks.update(self.open_marks)
        self.init()

    def init(self) -> None:
        """A new producer's init_transactions: what the old one left open is aborted."""
        self.open, self.open_marks = [], {}


SOURCE = {"a": [0, 1, 2, 5, 6, 7, 8, 12], "b": list(range(10)), "c": []}

actions = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.sampled_from(sorted(SOURCE)), st.integers(1, 4)),
        st.tuples(st.just("tick"), st.floats(0.0, 0.5)),
        # The reader delivers records again (a re-fetch after a seek or reassignment).
        st.tuples(st.just("refetch"), st.sampled_from(sorted(SOURCE)), st.integers(1, 4)),
        st.tuples(
            st.just("commit"),
            st.sampled_from(["ok", "ok", "ok", "lost-answer", "failed", "fenced", "send-failed"]),
        ),
    ),
    max_size=60,
)


class Driver:
    """What services/puller/task.py does around the machine, against the model."""

    def __init__(self) -> None:
        self.target = Target()
        self.now = 0.0
        self.failures = 0
        self.start()

    def start(self) -> None:
        self.target.init()
        self.txn: TaskTxn[str] = TaskTxn(LIMITS)
        self.txn.failures = self.failures
        self.reader: dict[str, int] = {}
        self.held: list[tuple[str, int]] = []
        self.started: dict[str, int] = {}
        for p in SOURCE:  # resume from the marks (or the start)
            start = self.target.marks.get(p, 0)
            self.txn.add_partition(p, start)
            self.reader[p] = self.started[p] = start

    def refetch(self, p: str, n: int) -> None:
        self.reader[p] = max(self.started[p], self.reader[p] - n)

    def read(self, p: str, n: int) -> None:
        records = [o for o in SOURCE[p] if o >= self.reader[p]][:n]
        for offset in records:
            if self.txn.take(p, offset, 10, self.now):
                if self.txn.may_send():
                    self.target.open.append((p, offset))
                else:
                    self.held.append((p, offset))
        # The reader moves past gaps (compaction, aborted records) too.
        end = records[-1] + 1 if records else self.reader[p]
        later = [o for o in SOURCE[p] if o >= end]
        self.reader[p] = later[0] if later else max(end, SOURCE[p][-1] + 1 if SOURCE[p] else 0)
        self.txn.skip_to(p, self.reader[p])

    # (skip_to never moves a position back: a refetch leaves the machine's where it is.)

    def commit(self, how: str) -> None:
        if how == "send-failed":  # a produce's delivery failed before the commit
            self.target.init()  # the broker aborts that transaction
            self.after(self.txn.fail(Outcome.FAILED, "delivery failed"))
            return
        if self.txn.phase is not Phase.OPEN and not self.txn.due(self.now, 0.1):
            return
        marks = self.txn.seal()
        self.target.open_marks = dict(marks)
        if how in ("ok", "lost-answer"):
            self.target.commit()
        else:  # the broker aborts the transaction (timed out, or fenced by a new epoch)
            self.target.init()
        outcome = {
            "ok": Outcome.COMMITTED,
            "lost-answer": Outcome.FAILED,
            "failed": Outcome.FAILED,
            "fenced": Outcome.FENCED,
        }[how]
        self.after(self.txn.finished(outcome, self.now, how))

    def after(self, decision: Decision) -> None:
        if decision.next is Next.GO_ON:
            for record in self.held:  # held during the commit: into the next transaction
                self.target.open.append(record)
            self.held = []
            return
        # DROP and RESTART both end this task object; a new owner (here: the same
        # driver, as the assignment would give it back) starts from the target's marks.
        self.failures = self.txn.failures
        self.start()

    def drain(self) -> None:
        """Everything read and committed, no more failures."""
        for _ in range(100):
            for p in SOURCE:
                self.read(p, 100)
            if self.txn.phase is Phase.OPEN:
                self.commit("ok")
            if all(self.reader[p] >= self.txn.committed[p] for p in SOURCE) and all(
                self.txn.committed[p] >= (SOURCE[p][-1] + 1 if SOURCE[p] else 0) for p in SOURCE
            ):
                return
        raise AssertionError("did not drain")


@settings(max_examples=400, deadline=None)
@given(actions)
def test_every_source_record_lands_exactly_once_in_order(steps: list[tuple]) -> None:
    driver = Driver()
    for step in steps:
        if step[0] == "read":
            driver.read(step[1], step[2])
        elif step[0] == "refetch":
            driver.refetch(step[1], step[2])
        elif step[0] == "tick":
            driver.now += step[1]
        else:
            driver.commit(step[1])
        # Invariant B at every step.
        txn = driver.txn
        for p in SOURCE:
            assert txn.committed[p] <= txn.sealed[p] <= txn.next[p]
        # The target's marks never claim more than its copies hold.
        for p, mark in driver.target.marks.items():
            landed = driver.target.copies.get(p, [])
            assert [o for o in SOURCE[p] if o < mark] == landed
    driver.drain()
    for p, offsets in SOURCE.items():
        assert driver.target.copies.get(p, []) == offsets
