"""Unit and property tests for crossfeed.core.partitions."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.partitions import (
    TopicPartition,
    grow_refused,
    partitions_to_add,
    staging_partition,
)

pytestmark = pytest.mark.unit

topics = st.text(min_size=1, max_size=30)


class TestTopicPartition:
    def test_str_and_parse(self) -> None:
        tp = TopicPartition("orders", 3)
        assert str(tp) == "orders/3"
        assert TopicPartition.parse("orders/3") == tp

    def test_parse_splits_at_last_slash(self) -> None:
        assert TopicPartition.parse("a/b/12") == TopicPartition("a/b", 12)

    @pytest.mark.parametrize("bad", ["orders", "orders/", "/3", "orders/-1", "orders/x", "o/٣"])
    def test_parse_rejects(self, bad: str) -> None:
        with pytest.raises(ValueError):
            TopicPartition.parse(bad)

    def test_ordering(self) -> None:
        tps = [TopicPartition("b", 0), TopicPartition("a", 10), TopicPartition("a", 2)]
        assert sorted(tps) == [
            TopicPartition("a", 2),
            TopicPartition("a", 10),
            TopicPartition("b", 0),
        ]

    def test_validation(self) -> None:
        with pytest.raises(ValueError, match="partition must be >= 0"):
            TopicPartition("t", -1)
        with pytest.raises(ValueError, match="topic must not be empty"):
            TopicPartition("", 0)

    def test_hashable_and_frozen(self) -> None:
        assert len({TopicPartition("t", 1), TopicPartition("t", 1)}) == 1


@given(topics, st.integers(0, 2**31))
def test_parse_round_trip(topic: str, partition: int) -> None:
    tp = TopicPartition(topic, partition)
    assert TopicPartition.parse(str(tp)) == tp


class TestPartitionsToAdd:
    @pytest.mark.parametrize(("source", "target"), [(3, 3), (3, 6), (1, 1)])
    def test_a_target_with_as_many_or_more_stays(self, source: int, target: int) -> None:
        assert partitions_to_add(source, target) == 0

    def test_a_target_with_fewer_gains_the_difference(self) -> None:
        assert partitions_to_add(4, 2) == 2
        assert partitions_to_add(6, 1) == 5

    @given(st.integers(1, 10_000), st.integers(1, 10_000))
    def test_the_target_ends_with_every_source_partition_and_never_shrinks(
        self, source: int, target: int
    ) -> None:
        added = partitions_to_add(source, target)
        assert added >= 0
        assert target + added == max(source, target)

    @pytest.mark.parametrize(("source", "target"), [(0, 1), (1, 0), (-1, 3)])
    def test_nonsense_counts(self, source: int, target: int) -> None:
        with pytest.raises(ValueError):
            partitions_to_add(source, target)


class TestGrowRefused:
    def test_one_line_saying_what_and_how_to_fix(self) -> None:
        message = grow_refused(6, 3, "Authorization failed", topic="orders")
        assert "\n" not in message
        assert "'orders'" in message and "3 partition(s)" in message and "has 6" in message
        assert "Authorization failed" in message
        assert "Alter" in message and "--partitions 6" in message

    def test_names_renamed_target(self) -> None:
        message = grow_refused(2, 1, "policy", topic="orders", target_topic="dc-a.orders")
        assert "target topic 'dc-a.orders'" in message and "source topic 'orders'" in message
        assert "--topic dc-a.orders" in message


class TestStagingPartition:
    def test_known_values_are_pinned(self) -> None:
        # crc32(b"orders/3") == 0xEFE4FE68: pinned so that a change of hash (which would
        # reorder events of running feeds across an upgrade) is noticed
        assert staging_partition("orders", 3, 12) == 0xEFE4FE68 % 12 == 0
        assert staging_partition("orders", 0, 12) == 2
        assert staging_partition("payments", 7, 5) == 1

    def test_same_in_another_process(self) -> None:
        code = (
            "from crossfeed.core.partitions import staging_partition;"
            "print(staging_partition('orders', 3, 7))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": "123"},
        )
        assert int(out.stdout) == staging_partition("orders", 3, 7)

    def test_spreads_partitions(self) -> None:
        used = {staging_partition("orders", p, 8) for p in range(64)}
        assert len(used) >= 6

    @pytest.mark.parametrize(("partition", "n"), [(0, 0), (-1, 3)])
    def test_rejects(self, partition: int, n: int) -> None:
        with pytest.raises(ValueError):
            staging_partition("t", partition, n)


@given(topics, st.integers(0, 10_000), st.integers(1, 1000))
def test_staging_partition_in_range_and_deterministic(topic: str, partition: int, n: int) -> None:
    result = staging_partition(topic, partition, n)
    assert 0 <= result < n
    assert staging_partition(topic, partition, n) == result
    assert staging_partition(topic, partition, 1) == 0
