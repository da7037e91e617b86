"""Unit and property tests for crossfeed.core.provenance_header: crossfeed-prov's value,
and reading provenance from either wire form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.provenance_header import (
    Provenance,
    SrcRef,
    hops,
    origin_topic,
    parse_prov,
    parse_src,
    src_of,
)
from crossfeed.wire.headers import HOPS, ORIGIN_CLUSTER, ORIGIN_TOPIC, PROV, SRC

pytestmark = pytest.mark.unit

A = "AAAAAAAAAAAAAAAAAAAAAA"
B = "BBBBBBBBBBBBBBBBBBBBB-"

cluster_ids = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:.",
    min_size=1,
    max_size=22,
)
any_topics = st.text(
    st.characters(blacklist_characters="/", codec="utf-8"), min_size=1, max_size=20
)


class TestHops:
    def test_absent_is_empty(self) -> None:
        assert hops([("k", b"v")]) == []

    def test_parses_comma_separated_oldest_first(self) -> None:
        assert hops([(PROV, b"a,b,c/t/0/1")]) == ["a", "b", "c"]
        assert hops([(HOPS, b"a,b,c")]) == ["a", "b", "c"]

    def test_ignores_empty_entries_and_spaces(self) -> None:
        assert hops([(HOPS, b" a,,b ,")]) == ["a", "b"]

    def test_none_value_is_empty(self) -> None:
        assert hops([(HOPS, None), (PROV, None)]) == []

    def test_several_headers_are_concatenated_in_order(self) -> None:
        assert hops([(HOPS, b"a"), ("x", b""), (PROV, b"b,c/t/0/1")]) == ["a", "b", "c"]

    def test_a_legacy_origin_not_first_goes_first(self) -> None:
        assert hops([(HOPS, b"b"), (ORIGIN_CLUSTER, b"a")]) == ["a", "b"]
        assert hops([(HOPS, b"a,b"), (ORIGIN_CLUSTER, b"a")]) == ["a", "b"]

    @pytest.mark.parametrize("name", [PROV, HOPS, ORIGIN_CLUSTER])
    def test_invalid_utf8_raises(self, name: str) -> None:
        with pytest.raises(ValueError, match=f"{name} header is not valid UTF-8"):
            hops([(name, b"\xff")])


class TestParseProv:
    def test_first_hop_reads_like_the_legacy_src(self) -> None:
        assert parse_prov(f"{A}/orders/3/42".encode()) == Provenance(
            (A,), SrcRef(A, "orders", 3, 42), "orders"
        )

    def test_hops_and_origin_topic(self) -> None:
        prov = parse_prov(f"{A},{B}/a.orders/0/7/orders".encode())
        assert prov == Provenance((A, B), SrcRef(B, "a.orders", 0, 7), "orders")
        assert prov.origin_cluster == A

    def test_the_grammar_bounds(self) -> None:
        # a partition of 9 digits at most, an offset of 19 digits at most 2^63-1 (the
        # sorter reads the same values alike)
        prov = parse_prov(b"a,c/t/999999999/9223372036854775807")
        assert prov.src == SrcRef("c", "t", 999999999, 2**63 - 1)

    @pytest.mark.parametrize(
        "value",
        [
            b"", b"c/t/1", b"c//1/2", b"/t/1/2", b"a,/t/1/2", b",c/t/1/2", b"a,,c/t/1/2",
            b"c/t/x/2", b"c/t/1/-2", b"c/t/1/ 2", b"c/t/+1/2", b"c/t/1/2\n", b"c/t/1/2/",
            b"c/t/1/2/o/p", b"c/t/\xd9\xa1/2", b"a b/t/1/2",
            b"c/t/1234567890/2",  # a partition of 10 digits
            b"c/t/1/9223372036854775808",  # an offset over 2^63-1
            b"c/t/1/" + b"0" * 19 + b"1",  # an offset of 20 digits
        ],
    )  # fmt: skip
    def test_rejects_malformed(self, value: bytes) -> None:
        with pytest.raises(ValueError, match=PROV):
            parse_prov(value)

    def test_rejects_non_utf8(self) -> None:
        with pytest.raises(ValueError, match="UTF-8"):
            parse_prov(b"\xff/t/1/2")


class TestParseLegacySrc:
    def test_round_trip(self) -> None:
        ref = SrcRef(A, "orders", 3, 42)
        assert parse_src(ref.encode()) == ref
        assert str(ref) == f"{A}/orders/3/42"

    @pytest.mark.parametrize(
        "value",
        [b"", b"c/t/1", b"/t/1/2", b"c/a/b/1/2", b"c/t/1/9223372036854775808", b"c/t/1/2\n"],
    )
    def test_rejects_malformed(self, value: bytes) -> None:
        with pytest.raises(ValueError, match=SRC):
            parse_src(value)


class TestReadEitherForm:
    def test_src_of_the_new_form(self) -> None:
        assert src_of([(PROV, f"{A},{B}/t/1/2".encode())]) == SrcRef(B, "t", 1, 2)

    def test_src_of_the_legacy_form(self) -> None:
        assert src_of([(SRC, f"{A}/t/1/2".encode())]) == SrcRef(A, "t", 1, 2)

    def test_src_of_neither(self) -> None:
        assert src_of([("u", b"1"), (PROV, b""), (SRC, None)]) is None

    def test_the_new_form_wins(self) -> None:
        both = [(SRC, f"{A}/t/1/2".encode()), (PROV, f"{B}/u/3/4".encode())]
        assert src_of(both) == SrcRef(B, "u", 3, 4)

    def test_an_unreadable_value_names_none(self) -> None:
        assert src_of([(PROV, b"garbage")]) is None
        assert src_of([(PROV, b"garbage"), (SRC, f"{A}/t/1/2".encode())]) == SrcRef(A, "t", 1, 2)
        assert src_of([(SRC, b"garbage")]) is None

    def test_origin_topic(self) -> None:
        assert origin_topic([(PROV, b"a,b/t/0/1/o")]) == "o"
        assert origin_topic([(PROV, b"a/t/0/1")]) == "t"
        assert origin_topic([(ORIGIN_TOPIC, b"o")]) == "o"
        assert origin_topic([(PROV, b"garbage"), (ORIGIN_TOPIC, b"o")]) == "o"
        assert origin_topic([(ORIGIN_TOPIC, b"a/b"), ("u", b"1")]) is None
        assert origin_topic([]) is None


@given(
    st.lists(cluster_ids, min_size=1, max_size=5),
    any_topics,
    any_topics,
    st.integers(0, 10**9 - 1),
    st.integers(0, 2**63 - 1),
)
def test_round_trip(
    chain: list[str], topic: str, first_topic: str, partition: int, offset: int
) -> None:
    prov = Provenance(tuple(chain), SrcRef(chain[-1], topic, partition, offset), first_topic)
    assert parse_prov(prov.encode()) == prov
    assert hops([(PROV, prov.encode())]) == chain
    assert prov.encode().endswith(b"" if topic == first_topic else f"/{first_topic}".encode())
