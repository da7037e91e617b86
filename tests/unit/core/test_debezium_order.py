"""crossfeed/core/debezium_order.py: Debezium's topics into commit order.

A simulated Debezium writes transactions (commit order) over several tables: each table's
events in its own partition, in commit order, END records to the transaction topic; a
reader interleaves the partitions at random, and Debezium may send a suffix of what it
wrote again (a Connect crash). Whatever the interleaving, every event comes out exactly
once, each transaction whole under one commit_ts, transactions in commit order, and no
event below a resolved_ts already given out.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.core.debezium_order import Emit, Joiner, Verdict, drain
from crossfeed.wire.debezium import DataEvent, TxnEnd

pytestmark = pytest.mark.unit

TABLES = ("public.accounts", "public.transfers", "public.audit")


@dataclass(frozen=True)
class Event:
    partition: str
    xid: str  # "" for a snapshot row
    order: int  # total_order (snapshot rows: their number)
    collection_order: int

    def facts(self) -> DataEvent:
        if not self.xid:
            return DataEvent(None, snapshot="true")
        return DataEvent(self.xid, self.order, self.collection_order)


def debezium(txns: list[list[str]], snapshot: int = 0, resend_from: int | None = None):
    """(per-partition event lists, transaction topic ENDs) for ``txns`` (each a list of the
    tables its events touch, in statement order), committed in list order."""
    partitions: dict[str, list[Event]] = {t: [] for t in TABLES}
    ends: list[TxnEnd] = []
    for n in range(snapshot):
        table = TABLES[n % 2]
        partitions[table].append(Event(table, "", n + 1, 0))

    def write(k: int, tables: list[str]) -> None:
        xid = str(1000 + k)
        counts: dict[str, int] = {}
        for order, table in enumerate(tables, 1):
            counts[table] = counts.get(table, 0) + 1
            partitions[table].append(Event(table, xid, order, counts[table]))
        collections = tuple(counts.items())
        ends.append(TxnEnd(xid, 100 + k, len(tables), collections, 1_000_000 + k))

    for k, tables in enumerate(txns):
        write(k, tables)
    if resend_from is not None:  # a Connect crash: the suffix again, whole
        for k in range(resend_from, len(txns)):
            write(k, txns[k])
    return partitions, ends


def run(
    partitions: dict[str, list[Event]],
    ends: list[TxnEnd],
    seed: int,
    covers=lambda c: True,
    crash_at: int | None = None,
):
    """Read everything in a random interleaving; returns [(event, Emit)] and the
    watermarks given out, in order, as (position in the output, resolved_ts). With
    ``crash_at``, the reader stops after that many reads and a new one carries on from
    what the old one committed (its state and positions, as the reader commits them)."""
    rng = random.Random(seed)
    joiner = Joiner(covers=covers)
    cursors = {name: 0 for name in partitions}
    end_cursor = 0
    end_index: dict[int, int] = {}  # commit LSN -> index in ends
    waiting = {name: deque() for name in partitions}
    out: list[tuple[Event, Emit]] = []
    marks: list[tuple[int, int]] = []
    reads = 0
    while end_cursor < len(ends) or any(cursors[n] < len(partitions[n]) for n in partitions):
        if reads == crash_at:
            # What the reader commits: the state, each partition at its first event not
            # decided, the transaction topic at the oldest END still held.
            state = joiner.snapshot_state()
            for name, queue in waiting.items():
                if queue:
                    cursors[name] = partitions[name].index(queue[0][0])
                queue.clear()
            held = [end_index[lsn] for lsn in joiner.held() if lsn in end_index]
            end_cursor = min(held, default=end_cursor)
            joiner = Joiner(covers=covers)
            joiner.restore(state, [e.xid for e in ends[:end_cursor]])
        reads += 1
        sources = [n for n in partitions if cursors[n] < len(partitions[n])]
        if end_cursor < len(ends):
            sources.append("END")
        pick = rng.choice(sources)
        for _ in range(rng.randint(1, 4)):
            if pick == "END" and end_cursor < len(ends):
                end_index.setdefault(ends[end_cursor].lsn, end_cursor)
                joiner.on_end(ends[end_cursor])
                end_cursor += 1
            elif pick != "END" and cursors[pick] < len(partitions[pick]):
                event = partitions[pick][cursors[pick]]
                cursors[pick] += 1
                waiting[pick].append((event, event.facts(), 5))
        for event, verdict in drain(joiner, waiting):
            if isinstance(verdict, Emit):
                out.append((event, verdict))
        if not joiner.streaming and all(
            cursors[n] >= sum(1 for e in partitions[n] if not e.xid) for n in partitions
        ):  # the reader's rule: every partition is past its snapshot rows
            joiner.start_streaming()
            for event, verdict in drain(joiner, waiting):
                if isinstance(verdict, Emit):
                    out.append((event, verdict))
        if rng.random() < 0.3:
            marks.append((len(out), joiner.resolved_ts()))
    assert all(not q for q in waiting.values()), "events left waiting at the end"
    marks.append((len(out), joiner.resolved_ts()))
    return out, marks


def check(txns: list[list[str]], out, marks, snapshot: int = 0) -> None:
    streamed = [(e, v) for e, v in out if e.xid]
    assert len(out) - len(streamed) == snapshot
    # exactly once
    keys = [(e.xid, e.order) for e, _ in streamed]
    assert len(keys) == len(set(keys))
    assert len(keys) == sum(len(t) for t in txns)
    # whole transactions under one commit_ts; header says id/seq/count
    by_xid: dict[str, list[tuple[Event, Emit]]] = {}
    for e, v in streamed:
        by_xid.setdefault(e.xid, []).append((e, v))
    commit_ts = {}
    for xid, events in by_xid.items():
        stamps = {v.commit_ts for _, v in events}
        assert len(stamps) == 1, f"txn {xid} under several commit_ts {stamps}"
        commit_ts[xid] = stamps.pop()
        seqs = sorted(int(v.txn.split("/")[1]) for _, v in events)
        counts = {int(v.txn.split("/")[2]) for _, v in events}
        assert counts == {len(events)}
        assert seqs == list(range(1, len(events) + 1))
        assert sum(v.completes for _, v in events) == 1
    # commit order: commit_ts strictly grows with the order of the ENDs
    ordered = [commit_ts[str(1000 + k)] for k in range(len(txns))]
    assert ordered == sorted(ordered) and len(set(ordered)) == len(ordered)
    # every commit_ts (snapshot rows too) is distinct per transaction of its own, and
    # every snapshot row comes before every streamed transaction
    snapshot_ts = [v.commit_ts for e, v in out if not e.xid]
    assert len(set(snapshot_ts)) == len(snapshot_ts)
    assert max(snapshot_ts, default=0) < min(commit_ts.values(), default=2**63)
    # marks never lie: nothing emitted after a mark is at or below it
    for position, resolved in marks:
        later = [v.commit_ts for _, v in out[position:]]
        assert all(ts > resolved for ts in later), (resolved, later[:3])
    assert [r for _, r in marks] == sorted(r for _, r in marks)


TXNS = st.lists(st.lists(st.sampled_from(TABLES), min_size=1, max_size=6), max_size=25)


@settings(max_examples=300, deadline=None)
@given(txns=TXNS, seed=st.integers(0, 2**32), snapshot=st.integers(0, 5))
def test_any_interleaving_gives_whole_transactions_in_commit_order(txns, seed, snapshot):
    partitions, ends = debezium(txns, snapshot)
    out, marks = run(partitions, ends, seed)
    check(txns, out, marks, snapshot)


@settings(max_examples=300, deadline=None)
@given(txns=TXNS.filter(bool), seed=st.integers(0, 2**32), data=st.data())
def test_what_debezium_sends_again_is_dropped(txns, seed, data):
    resend_from = data.draw(st.integers(0, len(txns) - 1))
    partitions, ends = debezium(txns, resend_from=resend_from)
    out, marks = run(partitions, ends, seed)
    check(txns, out, marks)


@settings(max_examples=300, deadline=None)
@given(txns=TXNS.filter(bool), seed=st.integers(0, 2**32), data=st.data())
def test_a_reader_restarted_anywhere_carries_on_exactly(txns, seed, data):
    resend = data.draw(st.none() | st.integers(0, len(txns) - 1))
    partitions, ends = debezium(txns, snapshot=data.draw(st.integers(0, 3)), resend_from=resend)
    snapshot = sum(1 for events in partitions.values() for e in events if not e.xid)
    out, marks = run(partitions, ends, seed, crash_at=data.draw(st.integers(0, 40)))
    check(txns, out, marks, snapshot)


def test_a_head_partly_sent_then_sent_again_whole_is_completed_once():
    # Debezium wrote two of txn 7's three events, crashed before its END, then wrote it all.
    joiner = Joiner(covers=lambda c: True, streaming=True)
    end = TxnEnd("7", 70, 3, (("public.accounts", 3),), 5_000_000)
    first = [DataEvent("7", n, n) for n in (1, 2)]
    again = [DataEvent("7", n, n) for n in (1, 2, 3)]
    joiner.on_end(end)
    verdicts = [joiner.offer("a/0", e) for e in first + again]
    emitted = [v for v in verdicts if isinstance(v, Emit)]
    assert [v.txn for v in emitted] == ["7.70/1/3", "7.70/2/3", "7.70/3/3"]
    assert verdicts[2:4] == [Verdict.DROP, Verdict.DROP]
    assert emitted[-1].completes
    assert joiner.offer("a/0", DataEvent("7", 1, 1)) is Verdict.DROP  # a third copy


def test_an_end_at_or_below_the_last_commit_lsn_is_a_copy():
    joiner = Joiner(covers=lambda c: True, streaming=True)
    end = TxnEnd("7", 70, 1, (("public.a", 1),), 1)
    assert joiner.on_end(end)
    assert isinstance(joiner.offer("a/0", DataEvent("7", 1, 1)), Emit)
    assert not joiner.on_end(end)
    assert not joiner.on_end(TxnEnd("6", 60, 1, (("public.a", 1),), 1))


def test_commit_ts_follows_the_log_even_when_the_clock_goes_back():
    joiner = Joiner(covers=lambda c: True, streaming=True)
    stamps = []
    for k, ts in enumerate([5_000_000, 4_000_000, 4_000_000, 9_000_000]):
        joiner.on_end(TxnEnd(str(k), 10 + k, 1, (("public.a", 1),), ts))
        verdict = joiner.offer("a/0", DataEvent(str(k), 1, 1))
        assert isinstance(verdict, Emit)
        stamps.append(verdict.commit_ts)
    assert stamps == [5_000_000, 5_000_001, 5_000_002, 9_000_000]


def test_heartbeats_move_an_idle_feed_but_never_a_transaction_under_way():
    joiner = Joiner(covers=lambda c: True, streaming=True)
    assert joiner.on_heartbeat(7_000_000)
    assert joiner.resolved_ts() == 7_000_000
    joiner.on_end(TxnEnd("1", 10, 2, (("public.a", 2),), 6_000_000))
    first = joiner.offer("a/0", DataEvent("1", 1, 1))
    assert isinstance(first, Emit) and first.commit_ts == 7_000_001
    assert not joiner.on_heartbeat(9_000_000)  # the head is under way
    assert joiner.resolved_ts() == 7_000_000
    joiner.offer("a/0", DataEvent("1", 2, 2))
    assert joiner.resolved_ts() == 7_000_001
    assert joiner.on_heartbeat(9_000_000)


def test_tables_the_feed_does_not_read_are_not_waited_for():
    joiner = Joiner(covers=lambda c: c == "public.a", streaming=True)
    # txn 1 touches only b: done at once; txn 2 touches a and b: a's events only, renumbered
    joiner.on_end(TxnEnd("1", 10, 2, (("public.b", 2),), 1_000_000))
    joiner.on_end(TxnEnd("2", 20, 3, (("public.b", 1), ("public.a", 2)), 2_000_000))
    assert joiner.held() == [20]
    first = joiner.offer("a/0", DataEvent("2", 2, 1))
    second = joiner.offer("a/0", DataEvent("2", 3, 2))
    assert isinstance(first, Emit) and isinstance(second, Emit)
    assert (first.txn, second.txn) == ("2.20/1/2", "2.20/2/2")
    assert second.completes


def test_a_transaction_a_crossfeed_sink_wrote_is_completed_but_never_sent():
    joiner = Joiner(covers=lambda c: True, streaming=True)
    joiner.on_end(TxnEnd("1", 10, 2, (("public.a", 2),), 1_000_000))
    joiner.on_end(TxnEnd("2", 20, 1, (("public.a", 1),), 2_000_000))
    events = [
        DataEvent("1", 1, 1, origin="crossfeed:pair-b-to-a"),
        DataEvent("1", 2, 2, origin="crossfeed:pair-b-to-a"),
        DataEvent("2", 1, 3, origin="pg_16384"),  # an application's, through a subscription
    ]
    waiting = {"a/0": deque((e, e, 0) for e in events)}
    out = list(drain(joiner, waiting))
    assert [(v.echo, v.completes) for _, v in out if isinstance(v, Emit)] == [
        (True, False),
        (True, True),
        (False, True),
    ]
    assert joiner.held() == [] and joiner.resolved_ts() == out[-1][1].commit_ts


def test_a_restart_carries_the_head_on_from_the_committed_state():
    joiner = Joiner(covers=lambda c: True, streaming=True)
    end = TxnEnd("3", 30, 3, (("public.a", 3),), 1_000_000)
    joiner.on_end(end)
    joiner.offer("a/0", DataEvent("3", 1, 1))
    state = joiner.snapshot_state()
    again = Joiner(covers=lambda c: True, streaming=True)
    again.restore(state, completed=["1", "2"])
    # Until the head's END is read again, nothing may promise past it.
    assert not again.on_heartbeat(9_000_000)
    assert again.resolved_ts() == 999_999
    assert again.offer("a/0", DataEvent("2", 1, 1)) is Verdict.DROP  # completed before
    assert again.on_end(end)  # the positions put the transaction topic back at its END
    assert again.offer("a/0", DataEvent("3", 1, 1)) is Verdict.DROP  # emitted before
    rest = [again.offer("a/0", DataEvent("3", n, n)) for n in (2, 3)]
    assert all(isinstance(v, Emit) and v.commit_ts == 1_000_000 for v in rest)
    assert [v.txn for v in rest if isinstance(v, Emit)] == ["3.30/2/3", "3.30/3/3"]


def test_no_transaction_goes_before_the_snapshot_is_read():
    # A streamed transaction's END may be read before a lagging table's snapshot rows; it
    # must still be ordered after them (its commit_ts above theirs).
    joiner = Joiner(covers=lambda c: True)
    joiner.on_end(TxnEnd("9", 90, 1, (("public.a", 1),), 5_000_000))
    assert joiner.offer("a/0", DataEvent("9", 1, 1)) is Verdict.WAIT
    assert joiner.resolved_ts() == 0 and not joiner.on_heartbeat(9_000_000)
    row = joiner.offer("b/0", DataEvent(None, snapshot="last"), 7_000_000)
    assert isinstance(row, Emit) and row.commit_ts == 7_000_000
    joiner.start_streaming()
    streamed = joiner.offer("a/0", DataEvent("9", 1, 1))
    assert isinstance(streamed, Emit) and streamed.commit_ts > row.commit_ts


def test_the_next_head_is_chosen_when_one_completes_not_by_a_later_offer():
    # The reader resumes a partition it rewound when the head changes; a head chosen
    # silently inside a later offer would leave that partition paused for good.
    joiner = Joiner(covers=lambda c: True, streaming=True)
    joiner.on_end(TxnEnd("1", 10, 1, (("public.a", 1),), 1))
    joiner.on_end(TxnEnd("2", 20, 1, (("public.b", 1),), 2))
    assert joiner.head_lsn() == 10
    done = joiner.offer("a/0", DataEvent("1", 1, 1))
    assert isinstance(done, Emit) and done.completes
    assert joiner.head_lsn() == 20
