"""The sorter's pure rules (services/sorter/rules.py): resolved state, R, release windows,
segments and the driver state's round trip. How each engine reads a row and decides that a
transaction is complete: tests/unit/sorter/test_driver_rows.py and
tests/integration/test_sorter_parse.py."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.services.sorter import rules
from crossfeed.services.sorter.rules import DriverState, Segment, Window

pytestmark = pytest.mark.unit

keys = st.sampled_from([f"t{t}/{p}" for t in range(2) for p in range(4)])
ts = st.integers(min_value=0, max_value=2**40)
mark_maps = st.dictionaries(keys, ts, max_size=8)


# -- resolved state and R ----------------------------------------------------------------------


@given(mark_maps, mark_maps, mark_maps)
def test_merge_is_monotonic_and_order_free(a, b, c):
    ab_c = rules.merge_resolved(rules.merge_resolved(a, b), c)
    a_bc = rules.merge_resolved(a, rules.merge_resolved(b, c))
    assert ab_c == a_bc
    for key, value in a.items():
        assert ab_c[key] >= value  # invariant A: never backwards
    assert rules.merge_resolved(ab_c, a) == ab_c


@given(mark_maps, st.sets(keys))
def test_global_resolved_waits_for_every_partition(resolved, expected):
    r = rules.global_resolved(resolved, expected)
    if any(k not in resolved for k in expected) or not (set(expected) | set(resolved)):
        assert r is None
    else:
        assert r == min(resolved.values())
        assert all(r <= resolved[k] for k in expected)


def test_a_partition_never_heard_from_holds_r():
    assert rules.global_resolved({"a/0": 10, "a/1": 20}, ["a/0", "a/1", "a/2"]) is None
    assert rules.global_resolved({"a/0": 10, "a/1": 20, "a/2": 5}, ["a/0", "a/1", "a/2"]) == 5
    # heard from but not (yet) listed by the source: it counts too
    assert rules.global_resolved({"a/0": 10, "new/0": 3}, ["a/0"]) == 3
    assert rules.holding_back({"a/0": 10, "a/1": 20}, ["a/0", "a/1", "a/2"]) == ["a/2"]
    assert rules.holding_back({"a/0": 10, "a/1": 20}, ["a/0", "a/1"]) == ["a/0"]


def test_forget_removed_only_drops_partitions_the_source_no_longer_lists():
    resolved = {"a/0": 1, "gone/0": 2, "new/0": 3}
    out = rules.forget_removed(resolved, ["a/0", "gone/0"], ["a/0"])
    assert out == {"a/0": 1, "new/0": 3}


@given(st.lists(st.one_of(st.none(), ts), max_size=20))
def test_r_never_goes_backwards(candidates):
    r = rules.NOTHING_RELEASED
    windows = []
    for cand in candidates:
        nxt = rules.next_resolved(r, cand)
        assert nxt >= r
        windows.append(Window(r, nxt))
        r = nxt
    # consecutive windows never overlap: each commit_ts is released at most once
    for value in range(0, 50):
        assert sum(w.releases(value) for w in windows) <= 1


def test_window():
    w = Window(10, 20)
    assert not w.empty and w.releases(11) and w.releases(20)
    assert not w.releases(10) and not w.releases(21)
    assert w.is_late(10) and not w.is_late(11)
    assert Window(20, 20).empty


# -- release windows in parts, and the engine ----------------------------------------------------


def test_split_cuts_a_big_release_between_commit_ts_only():
    counts = {11: 3, 12: 4, 13: 2, 20: 1, 40: 5}
    assert rules.split(counts, Window(10, 30), 100) == [Window(10, 30)]
    assert rules.split(counts, Window(10, 30), 7) == [Window(10, 12), Window(12, 30)]
    assert rules.split(counts, Window(10, 30), 4) == [
        Window(10, 11),
        Window(11, 12),
        Window(12, 30),
    ]
    assert rules.split(counts, Window(10, 30), 3) is None  # commit_ts 12 alone holds 4
    assert rules.split({}, Window(10, 30), 3) == [Window(10, 30)]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(1, 50), st.integers(1, 6), max_size=20),
    st.integers(0, 30),
    st.integers(1, 12),
)
def test_split_covers_the_window_in_order_within_the_limit(counts, low, limit):
    window = Window(low, low + 25)
    parts = rules.split(counts, window, limit)
    inside = {ts: n for ts, n in counts.items() if window.releases(ts)}
    if parts is None:
        assert max(inside.values()) > limit
        return
    assert (
        parts[0].prev_resolved_ts == window.prev_resolved_ts
        and parts[-1].resolved_ts == window.resolved_ts
    )
    for a, b in itertools.pairwise(parts):
        assert a.resolved_ts == b.prev_resolved_ts and not a.empty
    for part in parts:
        assert sum(n for ts, n in inside.items() if part.releases(ts)) <= limit
    # every commit_ts of the window in exactly one part
    for ts in inside:
        assert sum(part.releases(ts) for part in parts) == 1


def test_the_driver_reads_a_batch_unless_it_is_off_or_the_batch_before_was_too_big():
    assert rules.driver_reads(100, 0) is None
    assert rules.driver_reads(100, 100) is None
    assert rules.driver_reads(100, 101) is rules.Reason.AFTER_BIG_BATCH
    assert rules.driver_reads(0, 0) is rules.Reason.DRIVER_OFF


def test_the_driver_releases_a_window_in_parts_unless_one_commit_ts_is_too_big():
    counts = {11: 3, 12: 4, 13: 2, 40: 5}
    assert rules.choose(counts, Window(10, 30), 100) == rules.Choice(
        rules.Engine.DRIVER, rules.Reason.FITS, (Window(10, 30),)
    )
    assert rules.choose(counts, Window(10, 30), 4).parts == (
        Window(10, 11),
        Window(11, 12),
        Window(12, 30),
    )
    # 5 changes at 40 are outside the window: only 12's 4 are too many for 3
    assert rules.choose(counts, Window(10, 30), 3) == rules.Choice(
        rules.Engine.SPARK, rules.Reason.BIG_COMMIT_TS
    )
    # an empty window: the driver, with nothing to release
    assert rules.choose({}, Window(30, 30), 1) == rules.Choice(
        rules.Engine.DRIVER, rules.Reason.FITS
    )


# -- laggards ----------------------------------------------------------------------------------


def test_laggards_are_partitions_holding_r_without_progress():
    expected = ["t/0", "t/1", "t/2"]
    resolved = {"t/0": 100, "t/1": 50, "t/2": 100}
    advanced = {"t/0": 990.0, "t/1": 900.0, "t/2": 990.0}
    lags = rules.laggards(resolved, expected, advanced, now_s=1000.0, after_s=10)
    assert [(lag.partition, lag.resolved_ts_us, lag.since_s) for lag in lags] == [
        ("t/1", 50, 900.0)
    ]
    # at the minimum but advancing recently: not a laggard (yet)
    assert rules.laggards(resolved, expected, {**advanced, "t/1": 995.0}, 1000.0, 10) == []
    # never heard from: a laggard since it became expected
    lags = rules.laggards({"t/0": 1}, expected, {"t/1": 0.0, "t/2": 500.0}, 1000.0, 10)
    assert [lag.partition for lag in lags] == ["t/1", "t/2"]
    assert lags[0].resolved_ts_us is None


@given(mark_maps, mark_maps, st.sets(keys))
def test_advance_times(before, marks, expected):
    after = rules.merge_resolved(before, marks)
    old = {k: 1.0 for k in before}
    out = rules.advance_times(before, after, expected, old, 2.0)
    for key in set(expected) | set(after):
        moved = after.get(key, -2) > before.get(key, -2)
        assert out[key] == (2.0 if moved or key not in old else 1.0)


# -- segments and state ------------------------------------------------------------------------


@given(st.lists(st.tuples(ts, st.integers(0, 100)), max_size=20), ts)
def test_prune_keeps_exactly_the_segments_with_pending_rows(segs, r):
    segments = [Segment(f"s{i}", m, n) for i, (m, n) in enumerate(segs)]
    kept, dropped = rules.prune(segments, r)
    assert sorted(s.name for s in kept + dropped) == sorted(s.name for s in segments)
    assert all(s.max_ts > r for s in kept) and all(s.max_ts <= r for s in dropped)
    assert rules.should_compact(kept, 3) == (len(kept) > 3)


def test_driver_state_round_trip():
    state = DriverState(
        batch_id=7,
        resolved={"t/0": 5},
        expected=["t/0", "t/1"],
        expected_at_s=3.5,
        advanced_at={"t/0": 1.25},
        resolved_ts=4,
        segments=[Segment("seg-1", 9, 10)],
        garbage=["seg-0"],
    )
    again = DriverState.from_dict(state.as_dict())
    assert again == state
    assert again.pending_rows == 10
    assert DriverState.from_dict({"batch_id": -1}) == DriverState()


@settings(max_examples=30)
@given(st.integers(1, 6), st.integers(1, 30), st.randoms())
def test_release_simulation_orders_and_completes(partitions, txns, rnd: random.Random):
    """The driver's rules end to end on a simulated feed: changes spread over partitions,
    marks arriving per partition in any interleaving; every transaction is released once,
    complete, in (commit_ts, txn) order, and nothing is released above R."""
    expected = [f"t/{p}" for p in range(partitions)]
    rows: dict[str, list[tuple[int, str, int, int]]] = {k: [] for k in expected}
    for n in range(1, txns + 1):
        count = rnd.randint(1, 3)
        for seq in range(1, count + 1):
            rows[rnd.choice(expected)].append((n * 10, f"x{n:03d}", seq, count))
    # each partition delivers its rows in commit order with a mark just below its next
    # row, then a final one; partitions interleave at random, a few items at a time
    feeds: dict[str, list[tuple[str, object]]] = {}
    for key, part_rows in rows.items():
        items: list[tuple[str, object]] = []
        ordered = sorted(part_rows)
        for i, row in enumerate(ordered):
            items.append(("row", row))
            if i + 1 < len(ordered) and ordered[i + 1][0] > row[0]:
                items.append(("mark", ordered[i + 1][0] - 1))
        items.append(("mark", (txns + 1) * 10))
        feeds[key] = items
    pending: list[tuple[int, str, int, int]] = []
    resolved: dict[str, int] = {}
    r = rules.NOTHING_RELEASED
    released: list[tuple[int, str]] = []
    while any(feeds.values()):
        key = rnd.choice([k for k, v in feeds.items() if v])
        size = rnd.randint(1, 3)
        take, feeds[key] = feeds[key][:size], feeds[key][size:]
        for what, item in take:
            if what == "row":
                pending.append(item)  # type: ignore[arg-type]
            else:
                resolved = rules.merge_resolved(resolved, {key: item})  # type: ignore[dict-item]
        if not take:
            continue
        window = Window(r, rules.next_resolved(r, rules.global_resolved(resolved, expected)))
        if window.empty:
            continue
        inside = [p for p in pending if window.releases(p[0])]
        by_txn: dict[str, list[tuple[int, str, int, int]]] = {}
        for p in inside:
            by_txn.setdefault(p[1], []).append(p)
        for txn_id, parts in sorted(by_txn.items(), key=lambda kv: (kv[1][0][0], kv[0])):
            # whole: seq 1..count once each, one count, one commit_ts
            assert sorted(p[2] for p in parts) == list(range(1, parts[0][3] + 1))
            assert {(p[0], p[3]) for p in parts} == {(parts[0][0], parts[0][3])}
            released.append((parts[0][0], txn_id))
        pending = [p for p in pending if not window.releases(p[0])]
        r = window.resolved_ts
    assert released == sorted(released)
    assert len(released) == len(set(released)) == txns
    assert not pending


def test_a_source_is_idle_once_quiet_with_nothing_pending_since_the_last_release() -> None:
    watch = rules.IdleWatch(after_s=10.0, last_change_s=0.0)
    watch.note(changes=5, pending=5, resolved_ts=100, now_s=1.0)  # read, not released yet
    assert watch.idle_since(100.0) == 0  # changes wait: never idle
    watch.note(changes=0, pending=0, resolved_ts=300, now_s=2.0)  # released at R 300
    watch.note(changes=0, pending=0, resolved_ts=400, now_s=3.0)  # R moves on (the clock)
    assert watch.idle_since(5.0) == 0  # quiet for 4 s only
    assert watch.idle_since(11.0) == 300  # everything read is at or below 300
    watch.note(changes=1, pending=0, resolved_ts=500, now_s=12.0)  # a change, released at once
    assert watch.idle_since(21.0) == 0 and watch.idle_since(22.0) == 500
    fresh = rules.IdleWatch(after_s=1.0, last_change_s=0.0)
    fresh.note(changes=0, pending=0, resolved_ts=-1, now_s=5.0)  # nothing released yet
    assert fresh.idle_since(5.0) == 0


def test_a_batch_falls_behind_only_past_ten_trigger_intervals_and_a_second() -> None:
    assert not rules.falls_behind(0.3, 100)  # Spark would warn: three intervals
    assert not rules.falls_behind(0.9, 100)
    assert rules.falls_behind(1.2, 100)
    assert not rules.falls_behind(4.0, 500) and rules.falls_behind(5.1, 500)
    assert rules.falls_behind(1.1, 0)  # trigger 0: a second still is long


# -- the quiet pause ----------------------------------------------------------------------------


def test_quiet_pause_only_after_marks_alone_and_nothing_pending():
    assert rules.quiet_pause_s(0, 0, 77, 5000, 10.0) == 5.0
    assert rules.quiet_pause_s(1, 0, 77, 5000, 10.0) == 0.0  # a change read: next batch at once
    assert rules.quiet_pause_s(0, 3, 77, 5000, 10.0) == 0.0  # changes wait for R: no pause
    assert rules.quiet_pause_s(0, 0, -1, 5000, 10.0) == 0.0  # R unknown yet: a feed starting
    assert rules.quiet_pause_s(0, 0, 77, 0, 10.0) == 0.0  # pauses off


@given(
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(-1, 3),
    st.integers(0, 120_000),
    st.floats(0.1, 600, allow_nan=False),
)
def test_quiet_pause_stays_under_half_the_laggard_time(changes, pending, r, pause_ms, after_s):
    pause = rules.quiet_pause_s(changes, pending, r, pause_ms, after_s)
    assert 0 <= pause <= min(pause_ms / 1000, after_s / 2)
    assert (pause > 0) == (changes == 0 and pending == 0 and r >= 0 and pause_ms > 0)
