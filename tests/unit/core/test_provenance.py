"""Unit and property tests for crossfeed.core.provenance."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.provenance import (
    STAMPED,
    Header,
    SrcRef,
    Stamper,
    hops,
    parse_src,
    should_copy,
    stamp,
    user_headers,
)
from crossfeed.wire.headers import (
    COMMIT_TS,
    HOPS,
    ORIGIN_CLUSTER,
    ORIGIN_TOPIC,
    SRC,
    TXN,
    TYPE,
)

pytestmark = pytest.mark.unit

A = "AAAAAAAAAAAAAAAAAAAAAA"
B = "BBBBBBBBBBBBBBBBBBBBB-"
C = "CCCCCCCCCCCCCCCCCCCC_C"

cluster_ids = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    min_size=1,
    max_size=22,
)
topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=30)
user_names = st.text(max_size=12).filter(lambda n: not n.startswith("crossfeed-"))
user_header_lists = st.lists(st.tuples(user_names, st.none() | st.binary(max_size=8)), max_size=8)
offsets = st.integers(min_value=0, max_value=2**63 - 1)
partitions = st.integers(min_value=0, max_value=10_000)


def _one(headers: list[Header], name: str) -> bytes | None:
    values = [v for k, v in headers if k == name]
    assert len(values) == 1, (name, headers)
    return values[0]


def _stamp(headers: list[Header], cluster: str, topic: str = "orders") -> list[Header]:
    return stamp(headers, source_cluster_id=cluster, source_topic=topic, partition=3, offset=42)


class TestHops:
    def test_absent_is_empty(self) -> None:
        assert hops([("k", b"v")]) == []

    def test_parses_comma_separated_oldest_first(self) -> None:
        assert hops([(HOPS, b"a,b,c")]) == ["a", "b", "c"]

    def test_ignores_empty_entries_and_spaces(self) -> None:
        assert hops([(HOPS, b" a,,b ,")]) == ["a", "b"]

    def test_none_value_is_empty(self) -> None:
        assert hops([(HOPS, None)]) == []

    def test_duplicate_headers_are_concatenated(self) -> None:
        assert hops([(HOPS, b"a"), ("x", b""), (HOPS, b"b,c")]) == ["a", "b", "c"]

    def test_invalid_utf8_raises(self) -> None:
        with pytest.raises(ValueError, match="crossfeed-hops header is not valid UTF-8"):
            hops([(HOPS, b"\xff")])


class TestShouldCopy:
    def test_unstamped_record_is_copied(self) -> None:
        assert should_copy([("k", b"v")], A)

    def test_refused_when_target_in_hops(self) -> None:
        assert not should_copy([(HOPS, f"{A},{B}".encode())], A)
        assert not should_copy([(HOPS, f"{A},{B}".encode())], B)

    def test_copied_when_target_not_in_hops(self) -> None:
        assert should_copy([(HOPS, f"{A},{B}".encode())], C)

    def test_refused_when_target_is_origin(self) -> None:
        assert not should_copy([(ORIGIN_CLUSTER, A.encode())], A)

    def test_no_prefix_match(self) -> None:
        assert should_copy([(HOPS, b"abc")], "ab")


class TestStamp:
    def test_first_hop(self) -> None:
        out = stamp(
            [("user", b"1")], source_cluster_id=A, source_topic="orders", partition=3, offset=42
        )
        assert out == [
            ("user", b"1"),
            (ORIGIN_CLUSTER, A.encode()),
            (ORIGIN_TOPIC, b"orders"),
            (HOPS, A.encode()),
            (SRC, f"{A}/orders/3/42".encode()),
        ]

    def test_second_hop_keeps_origin_appends_hop_replaces_src(self) -> None:
        first = _stamp([("user", b"1")], A, "orders")
        second = stamp(first, source_cluster_id=B, source_topic="copy", partition=0, offset=7)
        assert _one(second, ORIGIN_CLUSTER) == A.encode()
        assert _one(second, ORIGIN_TOPIC) == b"orders"
        assert _one(second, HOPS) == f"{A},{B}".encode()
        assert _one(second, SRC) == f"{B}/copy/0/7".encode()

    def test_does_not_duplicate_last_hop(self) -> None:
        out = _stamp([(HOPS, f"{B},{A}".encode())], A)
        assert _one(out, HOPS) == f"{B},{A}".encode()

    def test_empty_origin_value_is_replaced(self) -> None:
        out = _stamp([(ORIGIN_CLUSTER, b""), (ORIGIN_TOPIC, None)], A, "t")
        assert _one(out, ORIGIN_CLUSTER) == A.encode()
        assert _one(out, ORIGIN_TOPIC) == b"t"

    def test_duplicated_crossfeed_headers_collapse_to_one(self) -> None:
        out = _stamp([(SRC, b"x/y/1/2"), (SRC, b"z/w/3/4"), (HOPS, b"q"), (HOPS, b"r")], A)
        assert _one(out, SRC) == f"{A}/orders/3/42".encode()
        assert _one(out, HOPS) == f"q,r,{A}".encode()

    def test_commit_ts_txn_and_type_kept_in_place(self) -> None:
        headers: list[Header] = [
            ("u1", b"a"),
            (COMMIT_TS, b"123"),
            ("u2", None),
            (TXN, b"t1/1/2"),
            (TYPE, b"resolved"),
        ]
        out = _stamp(headers, A)
        assert out[:5] == headers

    def test_input_not_modified(self) -> None:
        headers: list[Header] = [("u", b"1"), (HOPS, b"x")]
        _stamp(headers, A)
        assert headers == [("u", b"1"), (HOPS, b"x")]

    @pytest.mark.parametrize("bad", ["", "a,b", "a/b", "a b"])
    def test_rejects_bad_cluster_id(self, bad: str) -> None:
        with pytest.raises(ValueError, match=r"invalid cluster\.id"):
            _stamp([], bad)

    def test_rejects_negative_offset(self) -> None:
        with pytest.raises(ValueError, match="must be >= 0"):
            stamp([], source_cluster_id=A, source_topic="t", partition=0, offset=-1)


class TestParseSrc:
    def test_round_trip(self) -> None:
        ref = SrcRef(A, "orders", 3, 42)
        assert parse_src(ref.encode()) == ref
        assert str(ref) == f"{A}/orders/3/42"

    def test_the_grammar_bounds(self) -> None:
        # crossfeed/wire/grammar.py: a partition of 9 digits at most, an offset of 19 digits
        # at most 2^63-1 (the sorter reads the same values alike)
        assert parse_src(b"c/t/999999999/9223372036854775807") == SrcRef(
            "c", "t", 999999999, 2**63 - 1
        )
        assert parse_src(b"c/t/000000001/0000000000000000002") == SrcRef("c", "t", 1, 2)

    @pytest.mark.parametrize(
        "value",
        [
            b"", b"c/t/1", b"c//1/2", b"/t/1/2", b"c/t/x/2", b"c/t/1/-2", b"c/t/1/ 2",
            b"c/t/+1/2", b"c/t/1/2\n", b"c/t/\xd9\xa1/2",
            b"c/a/b/1/2",  # no '/' in a topic (nor in Kafka's topic names)
            b"c/t/1234567890/2",  # a partition of 10 digits
            b"c/t/1/9223372036854775808",  # an offset over 2^63-1
            b"c/t/1/" + b"0" * 19 + b"1",  # an offset of 20 digits
        ],
    )  # fmt: skip
    def test_rejects_malformed(self, value: bytes) -> None:
        with pytest.raises(ValueError, match="crossfeed-src"):
            parse_src(value)

    def test_rejects_non_utf8(self) -> None:
        with pytest.raises(ValueError, match="UTF-8"):
            parse_src(b"\xff/t/1/2")


def test_user_headers_drops_crossfeed_ones() -> None:
    headers: list[Header] = [("a", b"1"), (HOPS, b"x"), ("b", None), (COMMIT_TS, b"1"), ("a", b"2")]
    assert user_headers(headers) == [("a", b"1"), ("b", None), ("a", b"2")]


# --- properties ---------------------------------------------------------------------------


@given(user_header_lists, cluster_ids, topics, partitions, offsets)
def test_user_headers_byte_identical_and_in_order(
    users: list[Header], cluster: str, topic: str, partition: int, offset: int
) -> None:
    out = stamp(
        users, source_cluster_id=cluster, source_topic=topic, partition=partition, offset=offset
    )
    assert user_headers(out) == users
    for name in STAMPED:
        _one(out, name)


@given(user_header_lists, cluster_ids, cluster_ids, topics)
def test_two_hops_give_hops_in_order(users: list[Header], a: str, b: str, topic: str) -> None:
    first = stamp(users, source_cluster_id=a, source_topic=topic, partition=0, offset=0)
    second = stamp(first, source_cluster_id=b, source_topic=topic, partition=0, offset=1)
    assert hops(second) == ([a, b] if a != b else [a])
    assert _one(second, ORIGIN_CLUSTER) == a.encode()
    assert parse_src(_one(second, SRC) or b"") == SrcRef(b, topic, 0, 1)


@given(user_header_lists, cluster_ids, cluster_ids, topics)
def test_a_to_b_record_is_refused_on_the_way_back(
    users: list[Header], a: str, b: str, topic: str
) -> None:
    stamped = stamp(users, source_cluster_id=a, source_topic=topic, partition=1, offset=5)
    assert not should_copy(stamped, a)
    assert should_copy(stamped, b) == (a != b)


@given(user_header_lists, st.lists(cluster_ids, min_size=1, max_size=6, unique=True))
def test_chain_never_returns_to_a_visited_cluster(users: list[Header], chain: list[str]) -> None:
    headers = users
    for cluster in chain:
        assert should_copy(headers, cluster)
        headers = stamp(headers, source_cluster_id=cluster, source_topic="t", partition=0, offset=0)
    assert hops(headers) == chain
    assert all(not should_copy(headers, cluster) for cluster in chain)


@given(user_header_lists, cluster_ids, topics, partitions, offsets)
def test_restamping_is_idempotent(
    users: list[Header], cluster: str, topic: str, partition: int, offset: int
) -> None:
    def again(headers: list[Header]) -> list[Header]:
        return stamp(
            headers,
            source_cluster_id=cluster,
            source_topic=topic,
            partition=partition,
            offset=offset,
        )

    once = again(users)
    assert again(once) == once


@given(user_header_lists, cluster_ids, topics, partitions, offsets)
def test_the_stampers_first_hop_is_what_stamp_gives_a_first_hop(
    users: list[Header], cluster: str, topic: str, partition: int, offset: int
) -> None:
    stamper = Stamper(cluster, topic, partition)
    expected = stamp(
        users, source_cluster_id=cluster, source_topic=topic, partition=partition, offset=offset
    )
    assert stamper.first_hop(users, offset) == expected
    assert stamper.stamp(users, offset) == expected
    again = _stamp(users, "X")  # an earlier hop: the stamper parses it as stamp does
    assert stamper.stamp(again, offset) == stamp(
        again, source_cluster_id=cluster, source_topic=topic, partition=partition, offset=offset
    )


@given(
    cluster_ids,
    st.text(st.characters(blacklist_characters="/", codec="utf-8"), min_size=1, max_size=20),
    partitions,
    offsets,
)
def test_src_round_trip(cluster: str, topic: str, partition: int, offset: int) -> None:
    ref = SrcRef(cluster, topic, partition, offset)
    assert parse_src(ref.encode()) == ref
