"""Unit and property tests for crossfeed.core.topic_configs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.topic_configs import DEFAULT_EXCLUDE, Excluded, changes, synced

pytestmark = pytest.mark.unit

EXCLUDED = Excluded()
names = st.sampled_from(
    [
        "retention.ms",
        "cleanup.policy",
        "max.message.bytes",
        "segment.bytes",
        "min.insync.replicas",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "leader.replication.throttled.replicas",
    ]
)
values = st.sampled_from(["1", "2", "delete", "compact", "*"])
configs = st.dictionaries(names, values, max_size=8)


def test_mirror_maker_2s_defaults_are_excluded() -> None:
    for name in (
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    ):
        assert EXCLUDED(name), name
    assert not EXCLUDED("retention.ms") and not EXCLUDED("cleanup.policy")
    assert Excluded.parse(",".join(DEFAULT_EXCLUDE)) == EXCLUDED


def test_a_source_change_is_set_and_a_hand_change_of_a_synced_config_overwritten() -> None:
    source = {"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "2"}
    target = {"retention.ms": "5", "segment.bytes": "1048576", "min.insync.replicas": "1"}
    change = changes(source, target, EXCLUDED)
    assert change.set == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert change.delete == ("segment.bytes",)  # the source has no override of it
    # min.insync.replicas: excluded, neither taken from the source nor removed by hand
    assert change.applied_to(target) == {**synced(source, EXCLUDED), "min.insync.replicas": "1"}


def test_exclusions_are_regexes_matched_whole() -> None:
    excluded = Excluded.parse("retention\\..*, cleanup.policy")
    assert excluded("retention.ms") and excluded("retention.bytes") and excluded("cleanup.policy")
    assert not excluded("xretention.ms") and not excluded("cleanup.policy.x")
    with pytest.raises(ValueError, match="not a regular expression"):
        Excluded.parse("retention.(")


@given(configs, configs)
def test_applied_changes_make_the_target_follow_the_source_except_excluded(
    source: dict[str, str], target: dict[str, str]
) -> None:
    change = changes(source, target, EXCLUDED)
    after = change.applied_to(target)
    assert {k: v for k, v in after.items() if not EXCLUDED(k)} == synced(source, EXCLUDED)
    assert {k: v for k, v in after.items() if EXCLUDED(k)} == {
        k: v for k, v in target.items() if EXCLUDED(k)
    }
    assert not any(EXCLUDED(k) for k in [*change.set, *change.delete])
    assert not changes(source, after, EXCLUDED)  # a target that follows: nothing to do
