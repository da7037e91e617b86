"""The demo scenarios, non-interactively: replicate, lose dc-a, fail the group over; and
--cdc, a captured PostgreSQL database replicated whole."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from crossfeed.config import load_settings
from crossfeed.kafka import clients
from crossfeed.local import postgres
from crossfeed.membership import TopicTail
from crossfeed.wire import codec, topics

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _demo(*args: str, shows: str = "feed state: normal", timeout: float = 400) -> dict[str, Any]:
    """``crossfeed demo --no-tty --json ARGS``: it exits 0, its output ``shows`` that, and
    the summary it prints last."""
    run = subprocess.run(
        [sys.executable, "-m", "crossfeed.cli.main", "demo", "--no-tty", "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # By default: the live view shows the feed as the coordinator has it (it said
    # "starting" for ever).
    assert shows in run.stdout, run.stdout[-3000:]
    _assert_feeds_removed(run.stdout)
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def _assert_feeds_removed(output: str) -> None:
    """Every feed the demo says it created is removed in _crossfeed.state afterwards, so
    ``crossfeed status`` does not list it."""
    created = re.findall(r"created (?:mirror |ordered )?feed ([a-z0-9_-]+)", output)
    assert created, output[-3000:]
    states: dict[str, str] = {}

    def on_record(key: str, value: bytes | None) -> None:
        name = key.removeprefix("status/")
        if key.startswith("status/") and name in created and value:
            states[name] = codec.decode("FeedStatus", value)["state"]

    control = load_settings()
    tail = TopicTail(
        control.cluster(control.control_alias()).client_config(), topics.STATE, on_record
    ).start()
    try:
        assert tail.caught_up.wait(30)
    finally:
        tail.stop()
    assert states == dict.fromkeys(created, "removed"), (states, output[-3000:])


def test_demo_twice_in_a_row_loses_nothing_and_rereads_nothing(clusters):
    if clusters.backend != "local":
        pytest.skip("the demo runs on the local stack")
    for _ in range(2):  # running it twice in a row works
        summary = _demo("--records", "1500", "--rate", "750")
        assert summary["produced"] == 1500
        assert summary["lost"] == 0
        assert summary["replicated"] == summary["produced"]
        assert summary["re_read"] == 0
        assert summary["skipped"] == 0
        assert summary["consumed_before"] > 0 and summary["consumed_after"] > 0
        assert summary["consumed_before"] + summary["consumed_after"] == summary["produced"]
        # dc-a is back afterwards, same cluster
        assert clients.cluster_id(clusters.a.config, 30) == clusters.a.cluster_id


@pytest.mark.spark
@pytest.mark.slow  # make slow: tests/integration/test_cdc.py covers the path in make test
@pytest.mark.parametrize("format", ["json", "avro"])
def test_demo_cdc_replicates_a_captured_database_whole_and_cleans_up(clusters, format):
    """crossfeed demo --cdc, shortened, in either format: the summary holds (nothing torn,
    both tables equal row for row) and the source database, connector and replication slot
    are gone."""
    if clusters.backend != "local":
        pytest.skip("the demo runs on the local stack")
    summary = _demo(
        "--cdc", "--seconds", "10", "--format", format, shows="Debezium's snapshot arrived"
    )
    assert summary["ok"] and summary["equal"] and summary["torn"] == []
    assert summary["samples"] > 0
    assert summary["transactions"] > summary["snapshot_transfers"] == 200
    rows = {t["table"]: (t["source_rows"], t["target_rows"]) for t in summary["tables"]}
    assert rows["transfers"] == (summary["transactions"],) * 2
    assert rows["accounts"] == (100, 100)
    with psycopg.connect(postgres.source().uri, autocommit=True) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM pg_database WHERE datname LIKE 'demo_cdc_%'), "
            "(SELECT count(*) FROM pg_replication_slots "
            "WHERE slot_name LIKE 'crossfeed_demo_cdc_%')"
        ).fetchone()
    assert left == (0, 0)


@pytest.mark.spark
@pytest.mark.slow  # make slow: tests/integration/test_active_active.py covers it in make test
def test_demo_active_active_keeps_both_databases_equal_and_cleans_up(clusters):
    """crossfeed demo --active-active, shortened: both databases equal, the opening total on
    both, nothing sent back, and the pair's replication slots gone."""
    if clusters.backend != "local":
        pytest.skip("the demo runs on the local stack")
    summary = _demo("--active-active", "--seconds", "10", shows="both directions running")
    assert summary["ok"] and summary["equal"] and summary["sent_back"] == 0
    assert set(summary["totals"].values()) == {summary["opening_total"]}
    assert all(n > 0 for n in summary["transactions"].values())
    assert all(n > 0 for n in summary["samples"].values()) and summary["torn"] == []
    for server in (postgres.source(), postgres.target()):
        with psycopg.connect(server.uri, autocommit=True) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_replication_slots "
                "WHERE slot_name LIKE 'crossfeed_demo_aa_%'"
            ).fetchone()
        assert left == (0,)


@pytest.mark.spark
@pytest.mark.slow  # make slow: tests/integration/test_switchover_failback.py covers it in make test
def test_demo_dr_fails_over_fails_back_and_switches_back_with_both_databases_equal(clusters):
    """crossfeed demo --dr, shortened: the RPO reported with dc-a gone is a lower bound of
    what the application lost, exact once dc-a is back; failback lists exactly the lost
    transfers; the switch back leaves both databases equal and every slot of the drill
    gone."""
    if clusters.backend != "local":
        pytest.skip("the demo runs on the local stack")
    summary = _demo("--dr", "--seconds", "10", shows="switched back", timeout=1200)
    assert summary["ok"] and summary["equal"] and summary["tail_matches"]
    assert 0 < summary["rpo_reported"] <= summary["lost"] == summary["rpo_exact_later"]
    assert summary["writes_refused_s"] > 0
    for server in (postgres.source(), postgres.target()):
        with psycopg.connect(server.uri, autocommit=True) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_replication_slots s JOIN pg_database d "
                "ON d.datname = s.database WHERE s.database LIKE 'demo_dr_%'"
            ).fetchone()
        assert left == (0,)
