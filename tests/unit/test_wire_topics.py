"""Internal topics have one set of configs, whichever service creates them first."""

from __future__ import annotations

import pytest

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
