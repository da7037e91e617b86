"""What a micro-batch of resolved marks alone costs the sorter (bench/README.md).

    python -m crossfeed.bench.sorter_idle --config crossfeed.yaml [--seconds 90]
        [--warmup 30] [--master spark://127.0.0.1:17077] [--kafka-option K=V ...]

Against the clusters of ``--config`` (the first is the source, the control cluster the
target): a fresh staging topic of 4 partitions gets, every 250 ms, one resolved mark per
source partition (8) inside a Kafka transaction, as pullers write them to a caught-up
feed; the sorter runs as ``crossfeed sorter run`` and its batch reports after the warm-up
(counted from its first batch) give the figures: batches, their median and p90 seconds,
the Kafka read's median, and the sorter's CPU (its process tree: the driver, and the
executors in local mode).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from pathlib import Path

import psutil
import yaml

from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.wire import records

SOURCE_PARTITIONS = 8
STAGING_PARTITIONS = 4
COMMIT_INTERVAL_S = 0.25
BATCH_LINE = re.compile(r"batch \d+: .*?, ([0-9.]+)s \{(.*)\}")


def write_marks(conf: dict[str, str], topic: str, source: str, stop: threading.Event) -> None:
    producer = clients.producer(conf, **{"transactional.id": f"bench-{topic}"})
    producer.init_transactions()
    while not stop.is_set():
        now_us = int(time.time() * 1e6)
        producer.begin_transaction()
        for part in range(SOURCE_PARTITIONS):
            value = records.resolved_mark(
                source_cluster="bench",
                topic=source,
                partition=part,
                resolved_ts_us=now_us,
                next_offset=0,
            )
            producer.produce(
                topic,
                value,
                f"{source}/{part}".encode(),
                partition=(zlib.crc32(source.encode()) + part) % STAGING_PARTITIONS,
                headers=records.resolved_mark_headers(now_us),
            )
        producer.commit_transaction()
        stop.wait(COMMIT_INTERVAL_S)


def cpu_seconds(pid: int) -> float:
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return float(sum(p.cpu_times().user + p.cpu_times().system for p in procs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warmup", type=float, default=30)
    ap.add_argument("--master")
    ap.add_argument("--kafka-option", action="append", default=[])
    args = ap.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    source_alias = next(iter(config["clusters"]))
    target_alias = config.get("control_cluster", source_alias)
    target = config["clusters"][target_alias]
    name = f"idle-{uuid.uuid4().hex[:6]}"
    changes, source = f"_crossfeed.{name}.changes", f"{name}-src"
    kafka_topics.ensure_topic(clients.admin(config["clusters"][source_alias]), source, 8)
    kafka_topics.ensure_topic(clients.admin(target), changes, STAGING_PARTITIONS)
    work = Path(tempfile.mkdtemp(prefix="sorter-idle-"))
    sorter = config.setdefault("sorter", {})
    sorter.setdefault("checkpoint_dir", str(work / "checkpoints"))
    sorter.setdefault("trigger_interval_ms", 200)
    if args.master:
        sorter["spark_master"] = args.master
        sorter.setdefault("spark_conf", {}).update(
            {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        )
    options = dict(o.split("=", 1) for o in args.kafka_option)
    sorter["kafka_options"] = {**sorter.get("kafka_options", {}), **options}
    config["log_level"] = "INFO"
    (work / "crossfeed.yaml").write_text(yaml.safe_dump(config))
    (work / "feed.yaml").write_text(
        f"name: {name}\nsource: {source_alias}\nsink-uri: kafka://{target_alias}/{name}-out\n"
        f"topics: [{source}]\nmode: ordered\n"
    )
    stop = threading.Event()
    threading.Thread(target=write_marks, args=(target, changes, source, stop), daemon=True).start()
    log = work / "sorter.log"
    cmd = [sys.executable, "-m", "crossfeed.cli.main", "--config", str(work / "crossfeed.yaml")]
    cmd += ["sorter", "run", "--feed", name, "--feed-file", str(work / "feed.yaml")]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()  # a cluster's executor may take a while to come
        while "batch 0:" not in log.read_text() and time.monotonic() - started < 300:
            time.sleep(1)
        time.sleep(args.warmup)
        seen, cpu0 = log.read_text().count("batch "), cpu_seconds(proc.pid)
        time.sleep(args.seconds - args.warmup)
        cpu1, load = cpu_seconds(proc.pid), psutil.getloadavg()[0]
    finally:
        proc.terminate()
        proc.wait(60)
        stop.set()
    found = [BATCH_LINE.search(line) for line in log.read_text().splitlines()]
    batches = [m for m in found if m][seen:]
    secs = sorted(float(m.group(1)) for m in batches)
    reads = [float(r.group(1)) for m in batches if (r := re.search(r"'read': ([0-9.]+)", m[2]))]
    span = args.seconds - args.warmup
    median, p90 = statistics.median(secs), secs[int(0.9 * (len(secs) - 1))]
    print(
        f"{len(secs)} batches in {span:.0f} s (load {load:.2f}): median {median:.3f} s, "
        f"p90 {p90:.3f} s, read median {statistics.median(reads):.3f} s; "
        f"sorter CPU {(cpu1 - cpu0) / span:.2f} cores; log {log}"
    )


if __name__ == "__main__":
    main()
