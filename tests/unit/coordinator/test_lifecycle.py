"""Feed lifecycle and status (no Kafka): transitions, create checks, error state,
consistency_ts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.lifecycle import (
    LifecycleError,
    check_new_feed,
    describe_errors,
    transition,
)
from crossfeed.services.coordinator.members import Member
from crossfeed.services.coordinator.records import FeedStatus, StoredFeed
from crossfeed.services.coordinator.status import control_lost, next_status

pytestmark = pytest.mark.unit

SETTINGS = Settings.model_validate(
    {"clusters": {"dc-a": {"bootstrap.servers": "h:1"}, "dc-b": {"bootstrap.servers": "h:2"}}}
)


def spec(**overrides: Any) -> FeedSpec:
    data = {"name": "orders", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["o"]}
    return FeedSpec.model_validate({**data, **overrides})


def member(
    instance: str, role: str, checkpoints: dict[str, int] | None = None, error: str = ""
) -> Member:
    """``checkpoints``: per source partition, checkpoint_ts of a sink, resolved_ts of any
    other role (each in its own heartbeat field)."""
    timestamps = checkpoints or {}
    return Member(
        instance_id=instance,
        role=role,
        host="h",
        pid=1,
        version="0",
        started_at_ms=0,
        sent_at_ms=0,
        tasks=(),
        feeds=("orders",),
        state="running",
        address="",
        checkpoints=timestamps if role == "sink" else {},
        resolved={} if role == "sink" else timestamps,
        last_error=error,
    )


class TestTransitions:
    @pytest.mark.parametrize(
        ("state", "action", "after"),
        [
            ("normal", "pause", "paused"),
            ("error", "pause", "paused"),
            ("paused", "pause", "paused"),
            ("paused", "resume", "normal"),
            ("failed", "resume", "normal"),
            ("normal", "resume", "normal"),
            ("paused", "remove", "removed"),
            ("failed_over", "remove", "removed"),
            ("normal", "fail_over", "failed_over"),
            ("paused", "fail_over", "failed_over"),
        ],
    )
    def test_allowed(self, state: str, action: Any, after: str) -> None:
        assert transition("orders", state, action) == after

    @pytest.mark.parametrize("state", [None, "removed"])
    def test_unknown_or_removed_feed_is_404(self, state: str | None) -> None:
        with pytest.raises(LifecycleError) as err:
            transition("orders", state, "pause")
        assert err.value.status_code == 404
        assert "crossfeed changefeed list" in err.value.message

    def test_failed_over_feed_cannot_resume(self) -> None:
        with pytest.raises(LifecycleError) as err:
            transition("orders", "failed_over", "resume")
        assert err.value.status_code == 409
        assert "failback" in err.value.message


class TestCreateChecks:
    def test_name_taken_unless_removed(self) -> None:
        view = StateView(
            feeds={"orders": StoredFeed(spec(), 0)},
            statuses={"orders": FeedStatus("orders", "paused")},
        )
        with pytest.raises(LifecycleError) as err:
            check_new_feed(spec(), view, SETTINGS, lambda _a: None)
        assert err.value.status_code == 409
        assert "already exists (state paused)" in err.value.message
        removed = StateView(feeds=view.feeds, statuses={"orders": FeedStatus("orders", "removed")})
        check_new_feed(spec(), removed, SETTINGS, lambda _a: None)

    def test_a_second_feed_into_the_same_target_is_refused_naming_the_first(self) -> None:
        pg = "postgresql://crossfeed@127.0.0.1:25432/crossfeed?schema=replica"
        first = spec(name="replica", mode="ordered", **{"sink-uri": pg})
        view = StateView(
            feeds={"replica": StoredFeed(first, 0)},
            statuses={"replica": FeedStatus("replica", "normal")},
        )
        # Another user, host spelled in capitals, the same schema: the same tables.
        same = spec(
            name="bank",
            mode="ordered",
            **{"sink-uri": "postgresql://other@127.0.0.1:25432/crossfeed?schema=replica"},
        )
        with pytest.raises(LifecycleError) as err:
            check_new_feed(same, view, SETTINGS, lambda _a: None)
        assert err.value.status_code == 409 and err.value.code == "target_taken"
        assert "'replica' already writes schema replica of database crossfeed" in (
            err.value.message
        )
        assert "--shared-target" in err.value.message
        # Said on purpose; another schema, database or server; a removed feed: accepted.
        check_new_feed(
            spec(name="bank", mode="ordered", config={"target.shared": "true"}, **{"sink-uri": pg}),
            view,
            SETTINGS,
            lambda _a: None,
        )
        for uri in (
            pg.replace("replica", "ledger"),
            pg.replace("/crossfeed?", "/other?"),
            pg.replace("25432", "15432"),  # an active-active pair: each side's own database
        ):
            check_new_feed(
                spec(name="bank", mode="ordered", **{"sink-uri": uri}),
                view,
                SETTINGS,
                lambda _a: None,
            )
        gone = StateView(feeds=view.feeds, statuses={"replica": FeedStatus("replica", "removed")})
        check_new_feed(same, gone, SETTINGS, lambda _a: None)

    def test_feeds_into_one_kafka_topic_or_mirroring_the_same_topics_clash(self) -> None:
        ordered = spec(name="a", mode="ordered", **{"sink-uri": "kafka://dc-b/ledger"})
        mirror = spec(name="m")
        view = StateView(feeds={"a": StoredFeed(ordered, 0), "m": StoredFeed(mirror, 0)})
        with pytest.raises(LifecycleError, match="'a' already writes topic ledger on dc-b"):
            check_new_feed(
                ordered.model_copy(update={"name": "b"}), view, SETTINGS, lambda _a: None
            )
        with pytest.raises(LifecycleError, match="'m' already writes the same topics"):
            check_new_feed(spec(name="m2"), view, SETTINGS, lambda _a: None)
        # The way back of an active-active pair, another topic: accepted.
        back = spec(name="back", source="dc-b", **{"sink-uri": "kafka://dc-a"})
        check_new_feed(back, view, SETTINGS, lambda _a: None)
        other = spec(name="c", mode="ordered", **{"sink-uri": "kafka://dc-b/other"})
        check_new_feed(other, view, SETTINGS, lambda _a: None)

    def test_unknown_alias_names_the_known_ones(self) -> None:
        with pytest.raises(LifecycleError) as err:
            check_new_feed(spec(source="dc-x"), StateView(), SETTINGS, lambda _a: None)
        assert err.value.status_code == 400
        assert "unknown cluster alias 'dc-x' (known: dc-a, dc-b)" in err.value.message

    def test_unreachable_cluster_says_which(self) -> None:
        def probe(alias: str) -> str | None:
            return "no broker answers" if alias == "dc-b" else None

        with pytest.raises(LifecycleError) as err:
            check_new_feed(spec(), StateView(), SETTINGS, probe)
        assert err.value.message == "sink cluster dc-b: no broker answers"

    def test_validation_errors_read_as_one_line(self) -> None:
        with pytest.raises(ValidationError) as err:
            FeedSpec.model_validate(
                {
                    "name": "x",
                    "source": "dc-a",
                    "sink-uri": "kafka://dc-b",
                    "topics": [],
                    "config": {"nope": "1"},
                    "colour": "red",
                }
            )
        text = describe_errors(err.value.errors())
        assert "topics: give at least one topic name or regex (--topics)" in text
        assert "unknown option 'nope' (--config); known options: " in text
        assert "errors.tolerance" in text.split("known options: ", 1)[1]
        assert "unknown field 'colour'" in text
        assert "\n" not in text


class TestStatus:
    def status(self, previous: FeedStatus, instances: list[Member], age: int = 0) -> FeedStatus:
        return next_status(
            previous, instances, now_ms=5000, epoch=3, error_age_ms=age, stuck_after_ms=60_000
        )

    def test_error_while_an_instance_reports_one_then_normal(self) -> None:
        normal = FeedStatus("orders", "normal")
        bad = [member("p2", "puller", error="target topic too small"), member("p1", "puller")]
        error = self.status(normal, bad)
        assert (error.state, error.last_error) == ("error", "p2: target topic too small")
        assert error.leader_epoch == 3 and error.updated_at_ms == 5000
        healed = self.status(error, [member("p1", "puller")])
        assert (healed.state, healed.last_error) == ("normal", None)

    def test_stuck_error_becomes_failed_and_operator_states_stay(self) -> None:
        error = FeedStatus("orders", "error", last_error="p1: boom")
        failed = self.status(error, [member("p1", "puller", error="boom")], age=60_000)
        assert (failed.state, failed.last_error) == ("failed", "p1: boom")
        paused = FeedStatus("orders", "paused")
        assert self.status(paused, [member("p1", "puller", error="x")]).state == "paused"

    def test_consistency_ts_is_the_min_checkpoint_and_never_goes_back(self) -> None:
        pullers = [member("p1", "puller", {"t/0": 900, "t/1": 950})]
        sinks = [member("s1", "sink", {"t/0": 500}), member("s2", "sink", {"t/1": 700})]
        first = self.status(FeedStatus("orders", "normal"), pullers + sinks)
        assert (first.resolved_ts_us, first.checkpoint_ts_us, first.consistency_ts_us) == (
            900,
            500,
            500,
        )
        behind = [member("s1", "sink", {"t/0": 400}), member("s2", "sink", {"t/1": 700})]
        second = self.status(first, pullers + behind)
        assert second.checkpoint_ts_us == 400
        assert second.consistency_ts_us == 500

    def test_a_partition_without_a_sink_checkpoint_holds_consistency(self) -> None:
        pullers = [member("p1", "puller", {"t/0": 900, "t/1": 950})]
        sinks = [member("s1", "sink", {"t/0": 800})]
        previous = FeedStatus("orders", "normal", consistency_ts_us=100)
        status = self.status(previous, pullers + sinks)
        assert (status.checkpoint_ts_us, status.consistency_ts_us) == (0, 100)

    def test_nothing_known_keeps_the_timestamps(self) -> None:
        previous = FeedStatus(
            "orders", "paused", resolved_ts_us=5, checkpoint_ts_us=6, consistency_ts_us=7
        )
        status = self.status(previous, [])
        assert (status.resolved_ts_us, status.checkpoint_ts_us, status.consistency_ts_us) == (
            5,
            6,
            7,
        )


def test_while_the_control_cluster_is_away_running_feeds_show_error_with_the_reason() -> None:
    statuses = {
        "a": FeedStatus("a", "normal", consistency_ts_us=5),
        "b": FeedStatus("b", "error", last_error="x: older"),
        "c": FeedStatus("c", "paused"),
    }
    shown = control_lost(statuses, "control cluster dc-b unreachable for 4s")
    assert shown["a"].state == "error"
    assert shown["a"].last_error == "control cluster dc-b unreachable for 4s"
    assert shown["a"].consistency_ts_us == 5  # what was known stays
    assert shown["b"].last_error == "control cluster dc-b unreachable for 4s"
    assert shown["c"] == statuses["c"]  # a paused feed is not stuck: it is paused
    assert statuses["a"].state == "normal"  # the stored view is not changed
