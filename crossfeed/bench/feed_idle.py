"""What an ordered feed costs while its source is quiet (bench/README.md).

    python -m crossfeed.bench.feed_idle --config .crossfeed/local.yaml [--seconds 60]
        [--repeat N] [--feed-option KEY=VALUE ...]

A feed whose source sends nothing but resolved marks (a quiet topic, a quiet database)
still runs every process: the pullers commit marks, the sorter runs micro-batches of them,
the sink writes what they release. Operators run many feeds, most of them quiet most of
the time, so this is paid per feed. ``measure.idle_cores`` measures it on a running pipeline
(``make bench``'s ordered part does, after its lag phase); this command starts one on the
local clusters (dc-a → a Kafka topic on dc-b, two pullers, the sorter, the sink), sends
it a few transfers, waits until they arrived, and measures the quiet that follows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.measure import SETTLE_S, TargetWatch, idle_cores
from crossfeed.bench.ordered import PARTITIONS, Pipeline  # the ordered bench's pipeline

WATERMARK_INTERVAL_S = 1.0
"""The quiet source's producer still sends a watermark to every partition this often."""


def _measure(a: dict[str, Any], b: dict[str, Any], options: dict[str, Any], seconds: float) -> Any:
    from crossfeed.client.producer import ChangeProducer
    from crossfeed.kafka import clients
    from crossfeed.kafka import topics as kafka_topics
    from crossfeed.workload.run import run_bank

    with Janitor() as janitor:
        source = f"bench-idle-{uuid.uuid4().hex[:6]}"
        target = f"{source}-out"
        janitor.topics(a, [source])
        janitor.topics(b, [target])
        kafka_topics.ensure_topic(clients.admin(a), source, PARTITIONS)
        pipeline = Pipeline(
            janitor, a, b, source, f"kafka://dc-b/{target}",
            options={"staging.partitions": 4, **options},
        )  # fmt: skip
        watch = TargetWatch(b, target, 1).start()
        pids = pipeline.start()
        try:
            summary, _bank = run_bank(
                a, source, accounts=100, partitions=PARTITIONS, transactions=200
            )
            if not watch.wait_for(summary.events, timeout_s=300, idle_s=120):
                raise RuntimeError(
                    f"{watch.count} of {summary.events} changes arrived; logs in {pipeline.logs()}"
                )
            time.sleep(SETTLE_S)
            with ChangeProducer(
                a, resolved_interval_s=WATERMARK_INTERVAL_S, topics=[source]
            ).start_ticker():
                return idle_cores(pids, seconds)
        finally:
            watch.stop()
            pipeline.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--feed-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    a, b = config["clusters"]["dc-a"], config["clusters"]["dc-b"]
    options = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in args.feed_option)}
    runs = [_measure(a, b, options, args.seconds) for _ in range(args.repeat)]
    medians = {label: statistics.median(r[label] for r in runs) for label in runs[0]}
    print(json.dumps({"seconds": args.seconds, "runs": runs, "median": medians}, indent=1))


if __name__ == "__main__":
    main()
