"""The pure parts of ``make bench``: parsing, aggregation, MM2's configuration, the report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from crossfeed.bench import aggregate, failover, jvm, mirror, mm2, perf
from crossfeed.bench.cleanup import STALE_GROUPS, STALE_TOPICS
from crossfeed.bench.measure import percentiles

pytestmark = pytest.mark.unit

PERF_OUTPUT = """\
Reading payloads from: /tmp/payload.txt
Number of records read: 1024
62021 records sent, 12161.0 records/sec (1.16 MB/sec), 156.5 ms avg latency, 2124.0 ms max latency.
200000 records sent, 23402.761526 records/sec (2.23 MB/sec), 335.55 ms avg latency, \
2124.00 ms max latency, 234 ms 50th, 978 ms 95th, 1010 ms 99th, 1031 ms 99.9th.
"""


def test_producer_performance_summary_is_the_final_line_not_a_progress_line():
    s = perf.parse_summary(PERF_OUTPUT)
    assert s.records == 200_000
    assert s.records_per_s == pytest.approx(23402.761526)
    assert s.mib_per_s == pytest.approx(2.23)
    assert (s.p50_ms, s.p95_ms, s.p99_ms, s.p999_ms) == (234, 978, 1010, 1031)
    assert s.max_latency_ms == pytest.approx(2124.0)


def test_producer_performance_without_summary_is_an_error_quoting_the_output():
    with pytest.raises(ValueError, match="Connection refused"):
        perf.parse_summary("WARN something\nERROR Connection refused\n")


def test_payloads_are_distinct_lines_of_the_record_size(tmp_path: Path):
    lines = perf.payload_file(tmp_path, 100).read_text().splitlines()
    assert len(lines) == perf.PAYLOADS
    assert {len(line) for line in lines} == {100}
    assert len(set(lines)) == perf.PAYLOADS  # one repeated payload would flatter lz4


def test_perf_command_uses_the_payload_file_and_unthrottled_means_minus_one(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "kafka_classpath", lambda: "/x/kafka-clients-4.3.1.jar")
    cmd = perf.command("h:1", "t", 10, tmp_path / "p.txt", throughput=-1, workdir=tmp_path)
    assert cmd[cmd.index("--throughput") + 1] == "-1"
    assert cmd[cmd.index("--payload-file") + 1] == str(tmp_path / "p.txt")
    assert "batch.size=1048576" in cmd and "compression.type=lz4" in cmd
    steady = perf.command(
        "h:1", "t", 10, tmp_path / "p", throughput=2500.7, workdir=tmp_path,
        tuning=perf.STEADY_TUNING,
    )  # fmt: skip
    assert steady[steady.index("--throughput") + 1] == "2500"
    assert "linger.ms=1" in steady


def test_jar_versions_come_from_the_classpath():
    cp = ":".join(
        [
            "/m2/org/apache/kafka/kafka-clients-4.3.1.jar",
            "/m2/connect-mirror-client-4.3.1.jar",
            "/m2/connect-mirror-4.3.0.jar",
        ]
    )
    assert jvm.jar_version(cp, "kafka-clients") == "4.3.1"
    assert jvm.jar_version(cp, "connect-mirror") == "4.3.0"
    assert jvm.jar_version(cp, "kafka-streams") is None


def _mm2(groups: tuple[str, ...] = ()) -> dict[str, str]:
    cfg = mm2.Mm2Config("r1", "a:1", "b:2", ("bench-x", "bench-y"), groups=groups)
    return mm2.properties(cfg)


def test_mm2_is_one_identity_flow_tuned_like_crossfeed():
    p = _mm2()
    assert p["replication.policy.class"] == mm2.IDENTITY
    assert p["dc-a->dc-b.enabled"] == "true" and p["dc-b->dc-a.enabled"] == "false"
    assert p["dc-a->dc-b.topics"] == "bench-x|bench-y"
    assert p["dc-b.producer.batch.size"] == str(1 << 20)
    assert p["dc-b.producer.linger.ms"] == "10"
    assert p["dc-b.producer.compression.type"] == "lz4"
    assert p["dc-a.consumer.isolation.level"] == "read_committed"
    assert p["emit.heartbeats.enabled"] == "false"
    assert p["emit.checkpoints.enabled"] == "false"
    assert p["sync.group.offsets.enabled"] == "false"
    assert p["offset.storage.topic"].startswith("bench-r1-")  # swept if a run is killed
    assert "dc-b.group.id" in p
    assert "bench-r1-mm2-offsets" in mm2.render(p)


def test_mm2_failover_runs_checkpoint_and_sync_groups_every_second():
    p = _mm2(groups=("g1",))
    assert p["dc-a->dc-b.groups"] == "g1"
    assert p["emit.checkpoints.enabled"] == "true"
    assert p["sync.group.offsets.enabled"] == "true"
    assert p["emit.checkpoints.interval.seconds"] == "1"
    assert p["sync.group.offsets.interval.seconds"] == "1"


def test_stale_topics_are_only_the_benchmarks_own():
    for name in (
        "bench-ab12-1024b-r0",
        "_crossfeed.bench-ab12-cf.changes",
        "mm2-offset-syncs.dc-b.internal",
        "dc-a.checkpoints.internal",
        "heartbeats",
    ):
        assert STALE_TOPICS.match(name), name
    for name in ("orders", "_crossfeed.orders.changes", "_crossfeed.offset-syncs", "benchmark"):
        assert not STALE_TOPICS.match(name), name


def test_stale_groups_are_only_the_benchmarks_own():
    assert STALE_GROUPS.match("crossfeed-sink.bench-ab12-1024b-r0-cf")
    assert STALE_GROUPS.match("bench-ab12-r0-fo-mm2-app")
    assert not STALE_GROUPS.match("crossfeed-sink.orders")
    assert not STALE_GROUPS.match("payments-app")


def test_spread_ignores_missing_values_and_is_none_when_nothing_was_measured():
    assert aggregate.spread([3.0, None, 1.0, 2.0]) == {
        "min": 1.0,
        "median": 2.0,
        "max": 3.0,
        "n": 3,
    }
    assert aggregate.spread([None, None]) is None
    assert aggregate.spread([]) is None


def test_lookup_and_place_walk_dotted_paths():
    out: dict[str, Any] = {}
    aggregate.place(out, "lag.p99_ms", 5)
    assert out == {"lag": {"p99_ms": 5}}
    assert aggregate.lookup(out, "lag.p99_ms") == 5
    assert aggregate.lookup(out, "lag.p50_ms") is None
    assert aggregate.lookup({"lag": None}, "lag.p50_ms") is None


def _run(rate: float, cpu: float, p99: float | None = 10.0) -> dict[str, Any]:
    return {
        "records_per_s": rate,
        "mb_per_s": rate / 1000,
        "cpu_s_per_million": cpu,
        "lag": {"p50_ms": 1.0, "p99_ms": p99, "max_ms": 20.0, "rate_per_s": rate / 2},
        "processes": {"sink": {"cpu_s": cpu, "peak_rss_mb": 100.0}},
    }


def test_summarize_leaves_failed_repetitions_out_but_counts_them():
    runs = [_run(100, 10), {"error": "RuntimeError: boom"}, _run(300, 30)]
    s = aggregate.summarize(runs, aggregate.THROUGHPUT_FIGURES)
    assert s["records_per_s"] == {"min": 100, "median": 200, "max": 300, "n": 2}
    assert s["lag"]["p99_ms"]["median"] == 10.0
    assert s["processes"]["sink"]["peak_rss_mb"]["max"] == 100.0
    assert s["repetitions"] == 3 and s["failed"] == ["RuntimeError: boom"]


def test_ratios_pair_repetitions_measured_side_by_side():
    cf = [_run(200, 1), _run(90, 1), {"error": "x"}]
    mm = [_run(100, 2), _run(100, 2), _run(100, 2)]
    r = aggregate.ratios(cf, mm)
    assert r == {"min": 0.9, "median": 1.45, "max": 2.0, "n": 2}
    assert aggregate.ratios([{"error": "x"}], mm) is None


def test_throughput_section_has_every_system_ratio_and_raw_runs():
    runs = {"ceiling": [_run(400, 5)], "crossfeed": [_run(200, 10)], "mm2": [_run(100, 20)]}
    s = aggregate.throughput_section(runs)
    assert s["ratios"]["crossfeed/mm2"]["median"] == 2.0
    assert s["ratios"]["crossfeed/ceiling"]["median"] == 0.5
    assert s["ratios"]["cpu crossfeed/mm2"]["median"] == 0.5
    assert s["crossfeed"]["runs"] == runs["crossfeed"]


def test_throughput_section_compares_two_pullers_with_mm2_when_they_ran():
    runs = {"crossfeed": [_run(200, 10)], "crossfeed-2p": [_run(300, 12)], "mm2": [_run(100, 20)]}
    s = aggregate.throughput_section(runs)
    assert s["ratios"]["crossfeed-2p/mm2"]["median"] == 3.0
    assert s["ratios"]["cpu crossfeed-2p/mm2"]["median"] == 0.6
    assert "crossfeed-2p/mm2" not in aggregate.throughput_section({"mm2": runs["mm2"]})["ratios"]


def test_unavailable_failover_says_why_and_has_no_figures():
    s = aggregate.failover_section([], "crossfeed.translation is not importable")
    assert s == {"available": False, "reason": "crossfeed.translation is not importable"}
    measured = aggregate.failover_section(
        [{"ready_s": 2.0, "re_read": 0, "skipped": 0, "first_record_s": 1.0}], None
    )
    assert measured["available"] and measured["ready_s"]["median"] == 2.0
    assert measured["re_read"] == {"min": 0.0, "median": 0.0, "max": 0.0, "n": 1}


def test_percentiles_of_nothing_are_none_not_zero():
    assert percentiles([]) == {"p50": None, "p99": None, "max": None}
    p = percentiles([float(i) for i in range(1, 101)])
    assert p == {"p50": 51.0, "p99": 100.0, "max": 100.0}


def test_failover_values_and_reread_skip_counts():
    assert failover.parse_value(b"3:1207") == (3, 1207)
    assert failover.parse_value(b"junk") is None
    assert failover.parse_value(None) is None
    # p0 committed up to 10, resumes at 8: 8, 9, 10 again. p1 up to 5, resumes at 9: 6-8 skipped.
    # p2 resumes right after. p3 never committed on dc-a and resumes at its start.
    assert failover.reread_skipped({0: 10, 1: 5, 2: 7}, {0: 8, 1: 9, 2: 8, 3: 0}) == (3, 3)


def _result(tmp_path: Path) -> Path:
    ok = {**_run(150_000, 12.0), "records": 10}
    section = aggregate.throughput_section(
        {"ceiling": [_run(400_000, 3)], "crossfeed": [ok], "mm2": [{"error": "RuntimeError: x"}]}
    )
    result = {
        "settings": {"records": 1_000_000, "partitions": 8, "repeat": 1, "quick": True},
        "machine": {"cpus": 2, "load_avg_start": [3.0, 2.0, 1.0], "busy": True},
        "versions": {"crossfeed": "0.1.0", "kafka": "4.3.1", "mirrormaker2": "4.3.1"},
        "duration_s": 120.0,
        "startup": {"crossfeed": {"ready_s": 3.0, "cpu_s": {"puller": 1.0, "sink": 1.0}}},
        "throughput": {"1024": section},
        "failover": {
            "crossfeed": aggregate.failover_section([], "no translator yet"),
            "mm2": aggregate.failover_section(
                [{"ready_s": 1.5, "first_record_s": 1.0, "re_read": 120, "skipped": 0}], None
            ),
        },
        "ordered": aggregate.not_available("the sorter has not landed"),
    }
    path = tmp_path / "20260101T000000.json"
    path.write_text(json.dumps(result))
    return path


def test_report_shows_figures_and_says_not_available_never_zero(tmp_path: Path):
    from crossfeed.bench import report

    text = report.summary(_result(tmp_path))
    assert "crossfeed: 150,000 records/s" in text
    assert "MirrorMaker 2: n/a (RuntimeError: x)" in text
    assert "crossfeed/MM2 n/a" in text
    assert "crossfeed/ceiling 0.38" in text
    assert "crossfeed: not available — no translator yet" in text
    assert "MirrorMaker 2: 1.5 s" in text and "re-read 120, skipped 0" in text
    assert "ordered feeds: not available — the sorter has not landed" in text
    assert "BUSY" in text and "QUICK RUN" in text


def test_chart_is_a_png_even_with_figures_missing(tmp_path: Path):
    from crossfeed.bench import chart

    source = _result(tmp_path)
    png = chart.render(json.loads(source.read_text()), source.with_suffix(".png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mm2_topic_refresh_is_tuned_unless_the_default_is_asked_for():
    assert _mm2()["refresh.topics.interval.seconds"] == "5"
    default = mm2.properties(
        mm2.Mm2Config("r1", "127.0.0.1:1", "127.0.0.1:2", ("x",), refresh_topics_s=None)
    )
    assert "refresh.topics.interval.seconds" not in default  # MM2's own 600 s


def test_scale_report_shows_each_partition_count_and_a_discovery_not_reached():
    from crossfeed.bench import report

    lines = report._scale_lines(
        {
            "records": 300_000,
            "crossfeed": {
                "partitions": [
                    {
                        "partitions": 8,
                        "records_per_s": 90_000.0,
                        "startup_s": 1.5,
                        "peak_rss_mb": 120.0,
                    },
                    {"partitions": 1024, "error": "RuntimeError: 5 of 300,000 arrived\nlog"},
                ],
                "discovery": {
                    "topics": 1000,
                    "all_mirrored_s": 40.0,
                    "new_topic_s": 5.2,
                    "waited_s": 120.0,
                },
            },
            "mm2": {
                "discovery": {
                    "topics": 1000,
                    "all_mirrored_s": 60.0,
                    "new_topic_s": None,
                    "waited_s": 120.0,
                }
            },
        }
    )
    text = "\n".join(lines)
    assert "crossfeed, 8 partitions: 90,000 records/s, start-up 1.5 s, peak RSS 120 MB" in text
    assert "crossfeed, 1,024 partitions: failed: RuntimeError: 5 of 300,000 arrived" in text
    assert "its first record on dc-b after 5.2 s" in text
    assert (
        "MirrorMaker 2, a new topic among 1,000: its first record not on dc-b within 120 s" in text
    )


def test_equal_rate_lag_is_summarized_and_reported_beside_the_own_rate_lag():
    from crossfeed.bench import report

    runs = [_run(100, 10), _run(300, 30)]
    runs[0]["lag_equal"] = {"rate_per_s": 50.0, "p50_ms": 4.0, "p99_ms": 9.0, "max_ms": 12.0}
    runs[1]["lag_equal"] = {"error": "RuntimeError: copied nothing"}
    s = aggregate.summarize(runs, aggregate.THROUGHPUT_FIGURES)
    assert s["lag_equal"]["p99_ms"] == {"min": 9.0, "median": 9.0, "max": 9.0, "n": 1}
    text = "\n".join(report._system_lines("crossfeed", s))
    assert "lag at the rate offered to both (50 records/s): p50 4 ms, p99 9 ms, max 12 ms" in text


def test_backlog_rate_of_several_pullers_counts_from_the_settled_group():
    # One puller: first copy to last.
    assert mirror.backlog_rate(1000, 10.0, 20.0) == (100.0, 10.0)
    # Two: 200 copies were seen before the group settled at t=15; the other 800 took 5 s.
    assert mirror.backlog_rate(1000, 10.0, 20.0, settled_at=15.0, copied_before=200) == (
        160.0,
        5.0,
    )
    # Settled before the first copy: from the first copy.
    assert mirror.backlog_rate(1000, 10.0, 20.0, settled_at=8.0, copied_before=0) == (
        100.0,
        10.0,
    )
    # Most of it copied before the group settled: the whole copy counts.
    assert mirror.backlog_rate(1000, 10.0, 20.0, settled_at=19.0, copied_before=900) == (
        100.0,
        10.0,
    )


def _ordered_run(rate: float, p99: float, rss: float) -> dict[str, Any]:
    return {
        "available": True,
        "transfers": 100,
        "produce": {"events": 200, "events_per_s": 30_000.0},
        "spark_passthrough": {"events_per_s": 50_000.0, "peak_rss_mb": 900.0},
        "kafka": {
            "events_per_s": rate,
            "of_spark_passthrough": rate / 50_000,
            "lag_ms": {"p50": p99 / 2, "p99": p99, "max": p99 + 1},
            "peak_rss_mb": {"sorter": rss, "sink": 100.0},
            "cpu_us_per_change": {"sorter": rate / 2_000, "sink": 5.0, "total": rate / 2_000 + 5},
            "lag_cores": {"sorter": rate / 100_000, "total": rate / 50_000},
            "lag_steady": {
                "lag_ms": {"p50": p99 / 4, "p99": p99 / 2, "max": p99},
                "lag_cores": {"sorter": 0.2, "total": rate / 100_000},
                "lag_rate_events_per_s": 8_000.0,
                "lag_offered_events_per_s": 7_990.0,
            },
        },
    }


def test_ordered_repetitions_give_medians_the_highest_rss_and_keep_every_run():
    runs = [
        _ordered_run(40_000.0, 1_700.0, 1_800.0),
        {"error": "RuntimeError: Spark pass-through moved 0 of 200"},
        _ordered_run(60_000.0, 4_600.0, 1_700.0),
        _ordered_run(45_000.0, 1_900.0, 1_900.0),
    ]
    section = aggregate.ordered_section(runs)
    assert section["available"] and section["repetitions"] == 4
    assert section["failed"] == ["RuntimeError: Spark pass-through moved 0 of 200"]
    assert section["kafka"]["events_per_s"] == 45_000.0
    assert section["kafka"]["lag_ms"]["p99"] == 1_900.0
    assert section["kafka"]["of_spark_passthrough"] == pytest.approx(0.9)  # per repetition
    assert section["kafka"]["peak_rss_mb"] == {"sorter": 1_900.0, "sink": 100.0}
    assert section["spread"]["kafka.lag_ms.p99"] == {
        "min": 1_700.0, "median": 1_900.0, "max": 4_600.0, "n": 3,
    }  # fmt: skip
    assert "postgres.rows_per_s" not in section["spread"]  # no repetition measured it
    assert section["runs"] == runs
    assert runs[0]["kafka"]["events_per_s"] == 40_000.0  # the repetitions are not changed

    from crossfeed.bench import report

    text = "\n".join(report._ordered_lines(section, cpus=2))
    assert "p99 1,900 ms" in text
    assert "medians of 4 repetitions (1 failed): events/s [40,000–60,000], lag p99 " in text
    assert "[1,700–4,600] ms" in text
    # CPU per change: the medians of each process and of the total (20, 22.5 and 30 µs).
    assert section["kafka"]["cpu_us_per_change"] == {"sorter": 22.5, "sink": 5.0, "total": 27.5}
    assert "CPU per change: 27.5 µs (sorter 22.5, sink 5.0)" in text
    assert "CPU per change [25.0–35.0] µs" in text
    # The cores in use at half load: medians per process, and the total's spread.
    assert section["kafka"]["lag_cores"] == {"sorter": 0.45, "total": 0.9}
    assert "cores in use at half load: 0.90 of 2 (sorter 0.45)" in text
    assert "cores at half load [0.80–1.20]" in text
    # The steady rate's lag, the same rate whatever the machine: medians as well.
    assert section["kafka"]["lag_steady"]["lag_ms"]["p99"] == 950.0
    assert section["spread"]["kafka.lag_steady.lag_ms.p99"]["max"] == 2_300.0
    assert "lag at a steady 8,000/s (7,990/s written): p50 475 ms, p99 950 ms; cores in " in text
    assert "use 0.45 of 2" in text


def test_ordered_section_without_a_good_repetition_says_why():
    section = aggregate.ordered_section([{"error": "RuntimeError: no jars\ntrace"}])
    assert section["available"] is False
    assert section["reason"] == "RuntimeError: no jars"


def _titles_and_texts(fig: Any) -> tuple[list[str], list[str]]:
    titles = [ax.get_title() for ax in fig.axes]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    return titles, texts


ORDERED_RUN = {
    "available": True,
    "produce": {"events_per_s": 60_000.0},
    "spark_passthrough": {"events_per_s": 100_000.0},
    "kafka": {
        "events_per_s": 52_000.0,
        "lag_ms": {"p50": 900.0, "p99": 2_500.0},
        "peak_rss_mb": {"puller": 80.0, "sorter": 1_400.0, "sink": 90.0},
    },
    "postgres": {
        "rows_per_s": 53_000.0,
        "lag_ms": {"p50": 1_200.0, "p99": 1_500.0},
        "ceiling": {"rows_per_s": 90_000.0},
    },
}


def test_chart_draws_only_the_parts_that_were_measured(tmp_path: Path):
    from crossfeed.bench import chart

    full = json.loads(_result(tmp_path).read_text())
    only_ordered = {key: full[key] for key in ("settings", "machine", "versions", "duration_s")} | {
        "ordered": ORDERED_RUN
    }
    fig = chart.figure(only_ordered)
    titles, texts = _titles_and_texts(fig)
    assert titles == [
        "ordered feed, bank workload: throughput",
        "ordered feed: lag at half load",
        "ordered feed: peak RSS per process tree, MB",
    ]
    assert "n/a" not in texts
    notes = " ".join(t.get_text() for t in fig.texts)
    assert "mirror throughput and lag: not run" in notes and "failover: not run" in notes
    assert "MirrorMaker" not in fig._suptitle.get_text()
    chart.plt.close(fig)

    fig = chart.figure(full)  # mirror and failover ran; ordered could not be measured
    titles, _ = _titles_and_texts(fig)
    assert len(titles) == 6 and not any(t.startswith("ordered") for t in titles)
    assert "vs MirrorMaker 2 4.3.1" in fig._suptitle.get_text()
    assert "ordered feeds: not available — the sorter has not landed" in " ".join(
        t.get_text() for t in fig.texts
    )
    chart.plt.close(fig)

    fig = chart.figure({key: full[key] for key in ("settings", "machine", "versions")})
    assert fig.axes == []
    assert "nothing was measured" in " ".join(t.get_text() for t in fig.texts)
    chart.plt.close(fig)


def test_a_process_trees_cpu_keeps_what_an_exited_child_used():
    """ProcessCost(tree=True): the sorter's JVM is a child of its Python driver; a child
    that exits between two samples must not take its CPU time out of the figure."""
    import subprocess
    import sys
    import time

    from crossfeed.bench.measure import ProcessCost

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    parent = subprocess.Popen(
        [sys.executable, "-c",
         f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); "
         "time.sleep(30)"]
    )  # fmt: skip
    try:
        cost = ProcessCost({"parent": parent.pid}, interval_s=0.05, tree=True)
        deadline = time.monotonic() + 20
        while cost.cpu[-1]["parent"] < 0.35 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # the child has exited: only the sleeping parent is left
        used = cost.finish()["parent"]["cpu_s"]
        readings = [row["parent"] for row in cost.cpu]
        assert used >= 0.35, readings  # the child's burn is counted
        assert readings == sorted(readings), readings  # and never taken back
    finally:
        parent.kill()
        parent.wait()


def test_the_lag_phase_reports_the_cores_each_process_and_the_writer_used():
    """ordered.lag_phase: a pipeline process busy the whole phase counts about one core,
    the writer's own work counts as the benchmark's, and the total adds them up."""
    import subprocess
    import sys
    import time

    from crossfeed.bench import ordered

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    written: Any = object()  # what the workload returns, handed back as it is

    def write() -> Any:
        began = time.process_time()
        while time.process_time() - began < 0.5:  # the writer's own CPU
            pass
        time.sleep(1.0)
        return written

    def cpu_s(pid: int) -> float:  # user + system time of a process, from /proc
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        time.sleep(0.2)
        cpu_before, wall_before = cpu_s(busy.pid), time.monotonic()
        summary, cores = ordered.lag_phase({"sorter": busy.pid}, write)
        wall = time.monotonic() - wall_before
        used = (cpu_s(busy.pid) - cpu_before) / wall
    finally:
        busy.kill()
        busy.wait()
    assert summary is written
    # One busy process: counted, and once — as much of a core as it really got (on a
    # loaded machine that is less than one), measured here from /proc around the phase.
    assert used * 0.7 - 0.05 <= cores["sorter"] <= min(1.05, used * 1.3 + 0.05), (cores, used)
    # The writer burned 0.5 s of CPU over the phase (however long a loaded machine made
    # it), plus the meter's own little.
    assert 0.5 / wall * 0.8 <= cores[ordered.BENCH] <= 0.5 / wall + 0.15, (cores, wall)
    parts = sum(v for k, v in cores.items() if k != "total")
    assert cores["total"] == pytest.approx(parts, abs=0.02), cores


def test_a_failed_lag_phase_stops_its_meter_and_raises():
    import threading
    import time

    from crossfeed.bench import ordered

    def write() -> Any:
        raise RuntimeError("the workload could not write")

    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="could not write"):
        ordered.lag_phase({}, write)
    time.sleep(0.5)  # a stopped meter's thread ends at its next tick (0.2 s)
    assert set(threading.enumerate()) <= before
