"""Internal topics have one set of configs, whichever service creates them first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.wire import topics

pytestmark = pytest.mark.unit


def test_every_internal_topic_has_its_configs() -> None:
    assert topics.internal_config(topics.DLQ)["max.message.bytes"] == str(
        topics.DLQ_MAX_MESSAGE_BYTES
    )
    assert topics.internal_config(topics.OFFSET_SYNCS)["cleanup.policy"] == "compact,delete"
    for compacted in (topics.STATE, topics.HEARTBEATS, topics.CHECKPOINTS):
        assert topics.internal_config(compacted)["cleanup.policy"] == "compact"
    changes = topics.internal_config(topics.changes("orders"))
    assert changes == topics.staging_config() and changes["cleanup.policy"] == "delete"
    # The sorted stream carries the staged records: it must take anything staging took.
    assert topics.internal_config(topics.sorted_("orders")) == changes


def test_a_returned_config_is_a_copy() -> None:
    topics.internal_config(topics.STATE)["cleanup.policy"] = "delete"
    assert topics.internal_config(topics.STATE)["cleanup.policy"] == "compact"


@pytest.mark.parametrize("name", ["orders", "_crossfeed.orders", "__consumer_offsets", ""])
def test_other_topics_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="internal topics"):
        topics.internal_config(name)


def test_the_destination_timestamps_topic_is_compacted_and_internal() -> None:
    assert topics.internal_config(topics.DESTINATION_TIMESTAMPS)["cleanup.policy"] == "compact"
    assert topics.is_internal(topics.DESTINATION_TIMESTAMPS)
    assert topics.DESTINATION_TIMESTAMPS != topics.CONSUMER_TIMESTAMPS


names = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1)


@given(
    names,
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1),
    names,
    st.integers(0, 2**31 - 1),
)
def test_a_destination_timestamp_key_reads_back(
    cluster: str, group: str, topic: str, partition: int
) -> None:
    key = topics.destination_timestamp_key(cluster, group, topic, partition)
    assert topics.parse_destination_timestamp_key(key) == (cluster, group, topic, partition)


@pytest.mark.parametrize(
    "key", ["", "c", "c/g/t", "c//t/1", "c/g/t/x", "/g/t/1", "c/g/t/\u00b2", "c/g/t/\u0661"]
)
def test_other_keys_are_not_destination_timestamp_keys(key: str) -> None:
    assert topics.parse_destination_timestamp_key(key) is None


def test_a_cluster_id_with_a_slash_is_refused() -> None:
    with pytest.raises(ValueError, match="not a cluster id"):
        topics.destination_timestamp_key("a/b", "g", "t", 0)
