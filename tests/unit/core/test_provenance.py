"""Unit and property tests for crossfeed.core.provenance: stamping and loop prevention
(the invariants of its module docstring), with records of both wire forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.provenance import (
    Header,
    Provenance,
    SrcRef,
    Stamper,
    hops,
    origin_topic,
    parse_prov,
    should_copy,
    src_of,
    stamp,
    user_headers,
)
from crossfeed.wire.headers import (
    COMMIT_TS,
    HOPS,
    LEGACY_PROVENANCE,
    ORIGIN_CLUSTER,
    ORIGIN_TOPIC,
    PROV,
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


def _legacy(origin: str, origin_topic: str, chain: list[str], src: SrcRef) -> list[Header]:
    """The four headers an older puller stamped."""
    return [
        (ORIGIN_CLUSTER, origin.encode()),
        (ORIGIN_TOPIC, origin_topic.encode()),
        (HOPS, ",".join(chain).encode()),
        (SRC, src.encode()),
    ]


class TestShouldCopy:
    def test_unstamped_record_is_copied(self) -> None:
        assert should_copy([("k", b"v")], A)

    def test_refused_when_target_in_hops(self) -> None:
        stamped = [(PROV, f"{A},{B}/t/0/1".encode())]
        assert not should_copy(stamped, A)
        assert not should_copy(stamped, B)

    def test_copied_when_target_not_in_hops(self) -> None:
        assert should_copy([(PROV, f"{A},{B}/t/0/1".encode())], C)

    def test_no_prefix_match(self) -> None:
        assert should_copy([(PROV, b"abc/t/0/1")], "ab")

    def test_an_unparseable_value_still_names_its_hops(self) -> None:
        assert not should_copy([(PROV, f"{A},{B}/garbage".encode())], A)

    # Records copied by an older puller (a feed upgraded mid-stream).
    def test_legacy_hops_refuse(self) -> None:
        assert not should_copy([(HOPS, f"{A},{B}".encode())], A)
        assert not should_copy([(HOPS, f"{A},{B}".encode())], B)
        assert should_copy([(HOPS, f"{A},{B}".encode())], C)

    def test_legacy_origin_refuses(self) -> None:
        assert not should_copy([(ORIGIN_CLUSTER, A.encode())], A)

    def test_either_form_refuses_when_both_are_there(self) -> None:
        both = [(HOPS, A.encode()), (PROV, f"{B}/t/0/1".encode())]
        assert not should_copy(both, A) and not should_copy(both, B) and should_copy(both, C)


class TestStamp:
    def test_first_hop(self) -> None:
        out = stamp(
            [("user", b"1")], source_cluster_id=A, source_topic="orders", partition=3, offset=42
        )
        assert out == [("user", b"1"), (PROV, f"{A}/orders/3/42".encode())]

    def test_second_hop_keeps_origin_appends_hop_replaces_src(self) -> None:
        first = _stamp([("user", b"1")], A, "orders")
        second = stamp(first, source_cluster_id=B, source_topic="orders", partition=0, offset=7)
        assert second == [("user", b"1"), (PROV, f"{A},{B}/orders/0/7".encode())]

    def test_a_renamed_hop_keeps_the_origin_topic(self) -> None:
        first = _stamp([], A, "orders")  # copied into B's a.orders, read there next
        second = stamp(first, source_cluster_id=B, source_topic="a.orders", partition=0, offset=7)
        assert _one(second, PROV) == f"{A},{B}/a.orders/0/7/orders".encode()
        third = stamp(second, source_cluster_id=C, source_topic="orders", partition=1, offset=9)
        assert _one(third, PROV) == f"{A},{B},{C}/orders/1/9".encode()
        assert origin_topic(third) == "orders"

    def test_does_not_duplicate_last_hop(self) -> None:
        out = _stamp([(PROV, f"{B},{A}/t/0/1".encode())], A)
        assert _one(out, PROV) == f"{B},{A}/orders/3/42/t".encode()

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
        headers: list[Header] = [("u", b"1"), (PROV, b"x/t/0/1")]
        _stamp(headers, A)
        assert headers == [("u", b"1"), (PROV, b"x/t/0/1")]

    @pytest.mark.parametrize("bad", ["", "a,b", "a/b", "a b"])
    def test_rejects_bad_cluster_id(self, bad: str) -> None:
        with pytest.raises(ValueError, match=r"invalid cluster\.id"):
            _stamp([], bad)
        with pytest.raises(ValueError, match=r"invalid cluster\.id"):
            Stamper(bad, "t", 0)

    def test_rejects_negative_offset(self) -> None:
        with pytest.raises(ValueError, match="must be >= 0"):
            stamp([], source_cluster_id=A, source_topic="t", partition=0, offset=-1)


class TestStampFoldsTheLegacyForm:
    """A record an older puller copied A→B, read on B by a new one."""

    def test_a_legacy_copy_gets_one_header_with_the_same_provenance(self) -> None:
        legacy = [("u", b"1"), *_legacy(A, "orders", [A], SrcRef(A, "orders", 3, 42))]
        out = stamp(legacy, source_cluster_id=B, source_topic="orders", partition=3, offset=9)
        assert out == [("u", b"1"), (PROV, f"{A},{B}/orders/3/9".encode())]

    def test_the_legacy_origin_topic_is_kept(self) -> None:
        legacy = _legacy(A, "orders", [A], SrcRef(A, "orders", 3, 42))
        out = stamp(legacy, source_cluster_id=B, source_topic="a.orders", partition=3, offset=9)
        assert _one(out, PROV) == f"{A},{B}/a.orders/3/9/orders".encode()

    def test_a_legacy_origin_missing_from_the_hops_goes_first(self) -> None:
        odd = [(ORIGIN_CLUSTER, C.encode()), (HOPS, A.encode())]
        out = _stamp(odd, B)
        assert hops(out) == [C, A, B]

    def test_duplicated_legacy_headers_collapse_to_one(self) -> None:
        out = _stamp([(SRC, b"x/y/1/2"), (SRC, b"z/w/3/4"), (HOPS, b"q"), (HOPS, b"r")], A)
        assert out == [(PROV, f"q,r,{A}/orders/3/42".encode())]

    def test_empty_legacy_origin_values_are_none(self) -> None:
        out = _stamp([(ORIGIN_CLUSTER, b""), (ORIGIN_TOPIC, None)], A, "t")
        assert out == [(PROV, f"{A}/t/3/42".encode())]

    def test_entries_no_cluster_id_can_be_are_left_out(self) -> None:
        # ' ' and '/' are in no cluster.id (nor could crossfeed-prov hold a '/')
        out = _stamp([(HOPS, b"q,x/y,a b")], A)
        assert out == [(PROV, f"q,{A}/orders/3/42".encode())]


class TestStamperFastPath:
    def test_first_hop_is_one_header(self) -> None:
        assert Stamper(A, "orders", 3).first_hop([("u", None)], 42) == [
            ("u", None),
            (PROV, f"{A}/orders/3/42".encode()),
        ]


def test_user_headers_drops_crossfeed_ones() -> None:
    headers: list[Header] = [("a", b"1"), (PROV, b"x"), ("b", None), (COMMIT_TS, b"1"), ("a", b"2")]
    assert user_headers(headers) == [("a", b"1"), ("b", None), ("a", b"2")]


# --- properties ---------------------------------------------------------------------------


@given(user_header_lists, cluster_ids, topics, partitions, offsets)
def test_user_headers_byte_identical_and_in_order_and_one_prov_last(
    users: list[Header], cluster: str, topic: str, partition: int, offset: int
) -> None:
    out = stamp(
        users, source_cluster_id=cluster, source_topic=topic, partition=partition, offset=offset
    )
    assert user_headers(out) == users
    assert out[-1][0] == PROV and _one(out, PROV)
    assert not any(name in LEGACY_PROVENANCE for name, _ in out)


@given(user_header_lists, cluster_ids, cluster_ids, topics, topics)
def test_two_hops_give_hops_in_order(
    users: list[Header], a: str, b: str, topic: str, renamed: str
) -> None:
    first = stamp(users, source_cluster_id=a, source_topic=topic, partition=0, offset=0)
    second = stamp(first, source_cluster_id=b, source_topic=renamed, partition=0, offset=1)
    prov = parse_prov(_one(second, PROV) or b"")
    assert list(prov.hops) == hops(second) == ([a, b] if a != b else [a])
    assert prov.origin_cluster == a and prov.origin_topic == topic
    assert prov.src == src_of(second) == SrcRef(b, renamed, 0, 1)


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


@given(
    user_header_lists,
    st.lists(cluster_ids, min_size=1, max_size=4, unique=True),
    st.lists(cluster_ids, min_size=1, max_size=4, unique=True),
    topics,
    topics,
    partitions,
    offsets,
)
def test_a_chain_upgraded_mid_way_keeps_every_hop_and_the_origin(
    users: list[Header],
    old_chain: list[str],
    new_chain: list[str],
    origin: str,
    topic: str,
    partition: int,
    offset: int,
) -> None:
    """Hops taken by older pullers (the four headers), then by new ones (crossfeed-prov):
    nothing the old form said is lost, and the record is refused wherever it has been."""
    headers = [
        *users,
        *_legacy(old_chain[0], origin, old_chain, SrcRef(old_chain[-1], origin, 0, 1)),
    ]
    for cluster in new_chain:
        headers = stamp(
            headers,
            source_cluster_id=cluster,
            source_topic=topic,
            partition=partition,
            offset=offset,
        )
    expected = list(old_chain)
    for cluster in new_chain:
        if expected[-1] != cluster:
            expected.append(cluster)
    assert user_headers(headers) == users
    assert hops(headers) == expected
    assert all(not should_copy(headers, cluster) for cluster in [*old_chain, *new_chain])
    prov = parse_prov(_one(headers, PROV) or b"")
    assert prov == Provenance(
        tuple(expected), SrcRef(new_chain[-1], topic, partition, offset), origin
    )


@given(user_header_lists, cluster_ids, topics, partitions, offsets, st.booleans())
def test_restamping_is_idempotent(
    users: list[Header], cluster: str, topic: str, partition: int, offset: int, legacy: bool
) -> None:
    def again(headers: list[Header]) -> list[Header]:
        return stamp(
            headers,
            source_cluster_id=cluster,
            source_topic=topic,
            partition=partition,
            offset=offset,
        )

    start = (
        [*users, *_legacy(cluster, topic, [cluster], SrcRef(cluster, topic, 0, 0))]
        if legacy
        else users
    )
    once = again(start)
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
