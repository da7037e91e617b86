"""Unit tests for the translation tables, filters, scan classification and RPO rows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.offset_ranges import OffsetRun
from crossfeed.translation.books import (
    Frontier,
    RecordedBook,
    StampBook,
    SyncBook,
    frontier_of,
    parse_stamp_key,
    stamp_key,
)
from crossfeed.translation.filters import TranslationFilter
from crossfeed.translation.latest import Known
from crossfeed.translation.rpo import PositionRpo, partition_rpo, position_rpo
from crossfeed.translation.rules import ConsumerStamp
from crossfeed.translation.scan import Kind, RangeScan, Seen, classify, summarize
from crossfeed.wire import codec

pytestmark = pytest.mark.unit

A, B = "clusterAAAAAAAAAAAAAAAA", "clusterBBBBBBBBBBBBBBBB"


def _sync(
    feed: str = "f",
    topic: str = "t",
    partition: int = 0,
    start: int = 0,
    end: int = 9,
    target: int = 0,
    cluster: str = A,
    target_topic: str = "t",
) -> bytes:
    return codec.encode(
        "OffsetSync",
        {
            "source_cluster": cluster,
            "topic": topic,
            "partition": partition,
            "source_start": start,
            "source_end": end,
            "target_topic": target_topic,
            "target_partition": partition,
            "target_start": target,
            "feed": feed,
        },
    )


def test_sync_book_keeps_feeds_apart_and_merges_pieces() -> None:
    book = SyncBook()
    book.apply("f/t/0", _sync(start=0, end=9, target=100))
    book.apply("f/t/0", _sync(start=10, end=19, target=110))  # contiguous: merged
    book.apply("g/t/0", _sync(feed="g", start=0, end=4, target=0))  # another feed, same topic
    book.apply("f/t/0", None)  # tombstones are ignored
    entry = book.get("f", "t", 0)
    assert entry is not None and entry.index.runs() == [OffsetRun(0, 19, 100)]
    assert entry.frontier() == Frontier(20, 120)
    other = book.get("g", "t", 0)
    assert other is not None and other.frontier() == Frontier(5, 5)
    assert [e.feed for e in book.of_feed("f")] == ["f"]


def test_a_new_source_cluster_or_target_topic_starts_over() -> None:
    book = SyncBook()
    book.apply("f/t/0", _sync(start=0, end=9, target=0))
    book.apply("f/t/0", _sync(start=0, end=4, target=50, cluster=B))
    entry = book.get("f", "t", 0)
    assert entry is not None and entry.source_cluster == B
    assert entry.index.runs() == [OffsetRun(0, 4, 50)]


def test_truncate_keeps_the_run_before_the_cut() -> None:
    book = SyncBook()
    for i in range(5):
        book.apply("f/t/0", _sync(start=i * 10, end=i * 10 + 4, target=i * 10))
    # Offset 27 is in the gap after the run 20-24: that run must stay (rule 3, exact).
    assert book.truncate("f", "t", 0, 27) == 2
    entry = book.get("f", "t", 0)
    assert entry is not None
    assert [r.source_start for r in entry.index.runs()] == [20, 30, 40]
    found = entry.index.translate(27)
    assert found is not None and found.exact and found.target_offset == 30
    assert book.truncate("f", "t", 0, 5) == 0
    assert book.truncate("nope", "t", 0, 5) == 0


def test_runs_are_capped_per_partition() -> None:
    book = SyncBook(max_runs=8)
    for i in range(20):
        book.apply("f/t/0", _sync(start=i * 2, end=i * 2, target=i * 3))
    entry = book.get("f", "t", 0)
    assert entry is not None and len(entry.index) <= 8
    assert entry.frontier() == Frontier(39, 58)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=1, max_size=30))
def test_frontier_is_after_the_last_run(pieces: list[tuple[int, int]]) -> None:
    book = SyncBook()
    source = target = 0
    for gap, length in pieces:
        source += gap
        target += gap + 1
        book.apply("f/t/0", _sync(start=source, end=source + length - 1, target=target))
        source += length
        target += length
    entry = book.get("f", "t", 0)
    assert entry is not None
    last = entry.index.runs()[-1]
    assert frontier_of(entry.index) == Frontier(last.source_end + 1, last.target_end + 1)


def test_stamp_book_and_keys_with_slashes_in_group_names() -> None:
    book = StampBook()
    value = codec.encode(
        "ConsumerTimestamp",
        {
            "group": "team/billing",
            "topic": "orders",
            "partition": 2,
            "committed_offset": 10,
            "timestamp_ms": 1234,
            "committed_at_ms": 99,
        },
    )
    key = stamp_key("team/billing", "orders", 2)
    assert parse_stamp_key(key) == ("team/billing", "orders", 2)
    book.apply(key, value)
    assert book.get("team/billing", "orders", 2) == ConsumerStamp(10, 1234, 99)
    assert book.groups() == {"team/billing"}
    book.apply(key, None)
    assert book.get("team/billing", "orders", 2) is None
    assert parse_stamp_key("nonsense") is None
    assert parse_stamp_key("g/orders/\u00b2") is None  # not an int() either


def test_filters() -> None:
    default = TranslationFilter()
    assert default.group("billing") and not default.group("crossfeed-sink.f")
    assert not default.group("") and not default.group("__internal")
    assert default.group("_app")
    f = TranslationFilter(groups="team-.*", groups_exclude="team-tmp.*", topics_exclude="tmp\\..*")
    assert f.group("team-a") and not f.group("team-tmp1") and not f.group("other")
    assert f.topic("orders") and not f.topic("tmp.x")
    with pytest.raises(ValueError, match=r"translate\.groups"):
        TranslationFilter(groups="(")


def _headers(
    src: str | None, hops: str | None = None, *, legacy: bool = False
) -> list[tuple[str, bytes | None]]:
    """A record's headers naming source copy ``src`` after hops ``hops`` (whose last is
    src's cluster): one crossfeed-prov, or the legacy crossfeed-hops and crossfeed-src."""
    out: list[tuple[str, bytes | None]] = [("user", b"1")]
    if legacy:
        if hops is not None:
            out.append(("crossfeed-hops", hops.encode()))
        if src is not None:
            out.append(("crossfeed-src", src.encode()))
    elif src is not None:
        earlier = (hops or "").split(",")[:-1]
        out.append(("crossfeed-prov", ",".join([*earlier, src]).encode()))
    return out


@pytest.mark.parametrize("legacy", [False, True])
def test_classify(legacy: bool) -> None:
    where = {"target_cluster_id": B, "target_topic": "t", "target_partition": 0}
    assert classify(1, None, **where).kind is Kind.COPYABLE
    assert classify(1, _headers(None, legacy=legacy), **where).kind is Kind.COPYABLE
    copy = classify(1, _headers(f"{B}/t/0/42", hops=B, legacy=legacy), **where)
    assert (copy.kind, copy.target_offset) == (Kind.TARGET_COPY, 42)
    # Came through the target, but is a copy of another partition: not translatable by it.
    assert classify(1, _headers(f"{B}/t/3/42", hops=B, legacy=legacy), **where).kind is Kind.OTHER
    other = _headers(f"{A}/t/0/42", hops=f"{B},{A}", legacy=legacy)
    assert classify(1, other, **where).kind is Kind.OTHER
    # A copy from another cluster that never passed the target is copied on.
    onward = _headers(f"{A}/t/0/42", hops=A, legacy=legacy)
    assert classify(1, onward, **where).kind is Kind.COPYABLE


def test_rpo_rows() -> None:
    frontier = Frontier(10, 30)
    scan = summarize(10, 20, 20, [Seen(12, Kind.COPYABLE, timestamp_ms=5_000)])
    row = partition_rpo(
        "t",
        0,
        frontier=frontier,
        source_end=20,
        scan=scan,
        newest_source_ts_ms=4_000,
        last_replicated_ts_ms=2_000,
        known_at_ms=7,
    )
    assert (row.unreplicated, row.counted, row.rpo_seconds, row.target_frontier) == (
        1,
        True,
        3.0,
        30,
    )
    caught_up = partition_rpo("t", 0, frontier=frontier, source_end=12, scan=RangeScan(10, 12, 12))
    assert (caught_up.unreplicated, caught_up.rpo_seconds) == (0, 0.0)
    unknown = partition_rpo("t", 0, frontier=frontier, source_end=None)
    assert (unknown.unreplicated, unknown.rpo_seconds) == (-1, None)
    by_offsets = partition_rpo("t", 0, frontier=frontier, source_end=15)
    assert (by_offsets.unreplicated, by_offsets.counted) == (5, False)
    with pytest.raises(ValueError, match="frontier"):
        partition_rpo("t", 0, frontier=frontier, source_end=20, scan=RangeScan(0, 20, 20))


# -- position RPO ---------------------------------------------------------------------------


def _position(**given: Any) -> PositionRpo:
    args: dict[str, Any] = {
        "source_reachable": False,
        "exact": True,
        "method": "offset-sync",
        "target_offset": 100,
        "target_frontier": 130,
        "known_from": "commit-log",
        "known_until_ms": 9_990,
        "committed_at_ms": 9_000,
        "now_ms": 10_000,
    }
    args.update(given)
    return position_rpo(**args)


def test_position_at_the_last_commit_reads_nothing_again() -> None:
    p = _position(source_reachable=True, known_from="listed", committed_at_ms=-1)
    assert p == PositionRpo(True, "listed", 9_990, None, 0)


def test_a_stale_position_may_read_again_up_to_the_end_of_the_copies() -> None:
    p = _position()
    assert (p.last_commit, p.commit_age_s, p.reread_max) == (False, 1.0, 30)
    # The clock of the broker that stamped the commit may run ahead: never a negative age.
    assert _position(committed_at_ms=10_500).commit_age_s == 0.0


def test_a_position_past_every_recorded_commit_is_at_the_last_one() -> None:
    # latest.py rule 4: the commit log holds a commit the opt-in could not record.
    p = _position(known_from="commit-log", past_recorded=True)
    assert (p.last_commit, p.known_from, p.reread_max) == (True, "commit-log", 0)


def test_a_group_at_the_frontier_reads_nothing_again_even_when_stale() -> None:
    # It had read every copy: any later commit lies past the frontier too.
    assert _position(method="frontier", exact=False, target_offset=130).reread_max == 0


@pytest.mark.parametrize(
    ("given", "bound"),
    [
        ({"target_offset": None, "method": "none", "exact": False}, -1),
        ({"target_frontier": None}, -1),
        ({"source_reachable": True, "exact": False, "method": "timestamp"}, 30),
        ({"target_offset": 140}, 0),  # past the frontier: nothing there to read again
    ],
)
def test_position_bounds(given: dict[str, Any], bound: int) -> None:
    assert _position(**given).reread_max == bound


@given(
    st.booleans(),
    st.sampled_from(["offset-sync", "header", "frontier", "timestamp", "before-first"]),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
def test_position_bound_never_exceeds_the_copies_after_the_resume_point(
    reachable: bool, method: str, target: int, frontier: int
) -> None:
    exact = method in ("offset-sync", "header")
    p = _position(
        source_reachable=reachable,
        exact=exact,
        method=method,
        target_offset=target,
        target_frontier=frontier,
    )
    assert 0 <= p.reread_max <= max(0, frontier - target)
    assert p.last_commit is reachable
    if reachable and exact:
        assert p.reread_max == 0


def test_a_position_recorded_on_the_destination_is_the_last_commit_with_the_source_gone() -> None:
    p = _position(known_from="destination-timestamps")
    assert (p.last_commit, p.reread_max) == (True, 0)
    # Not exact (past the copies, say): the bound stays the copies after the resume point.
    rough = _position(known_from="destination-timestamps", exact=False, method="timestamp")
    assert (rough.last_commit, rough.reread_max) == (True, 30)


def _recorded_value(offset: int, at_ms: int, timestamp_ms: int = 5) -> bytes:
    return codec.encode(
        "ConsumerTimestamp",
        {
            "group": "g",
            "topic": "t",
            "partition": 1,
            "committed_offset": offset,
            "timestamp_ms": timestamp_ms,
            "committed_at_ms": at_ms,
        },
    )


def test_recorded_book_keeps_the_newest_commit_per_source_cluster() -> None:
    book = RecordedBook()
    book.apply(f"{A}/g/t/1", _recorded_value(10, 100))
    book.apply(f"{A}/g/t/1", _recorded_value(12, 110))
    book.apply(f"{B}/g/t/1", _recorded_value(99, 120))  # the same group on another source
    assert book.of_cluster(A) == [(("g", "t", 1), Known(12, 110, 110, "destination-timestamps"))]
    assert book.of_cluster(None) == []
    assert book.stamp(A, "g", "t", 1) == ConsumerStamp(12, 5, 110)
    book.apply(f"{A}/g/t/1", None)  # a tombstone forgets it
    assert book.of_cluster(A) == [] and len(book) == 1
    with pytest.raises(ValueError, match="consumer-timestamps key"):
        book.apply("g/t/x", _recorded_value(1, 1))
