"""A sorter's Spark driver run once, so its JVM records a class archive (``make setup``).

``python -m crossfeed.services.sorter.archive_training <bootstrap> <topic>``, started by
``crossfeed local archive-classes`` with ``CROSSFEED_CLASS_ARCHIVES_RECORD`` set, beside
the training broker: the driver is configured as a sorter's (``sparkconf.spark_conf``),
reads ``topic`` through a streaming query as a sorter does, and exits; its JVM writes the
classes it loaded as it exits (crossfeed/class_archive.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crossfeed import class_archive
from crossfeed.config.settings import SorterSettings
from crossfeed.local.archive_training import READY
from crossfeed.services.sorter import sparkconf
from crossfeed.services.sorter.job import build_session


def main(bootstrap: str, topic: str) -> None:
    jar_list = sparkconf.jars()
    # The defaults, as for a sorter without a sorter section.
    settings = SorterSettings.model_validate({})
    conf = sparkconf.spark_conf(settings, "class-archive", jar_list)
    recorded = Path(os.environ[class_archive.RECORD_ENV])
    key = class_archive.key(sparkconf.driver_classpath(jar_list))
    (recorded / "spark-driver.key").write_text(key + "\n")
    spark = build_session(conf, local=True)
    # Started beside the broker: read once the caller says the topic holds its records.
    ready = recorded / READY
    deadline = time.monotonic() + 300
    while not ready.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{ready} did not appear in 300 s")
        time.sleep(0.2)
    seen = []

    def collect(frame: Any, _batch_id: int) -> None:
        seen.extend(frame.select("partition", "offset", "headers", "value").collect())

    with tempfile.TemporaryDirectory(prefix="crossfeed-archive-checkpoint-") as checkpoint:
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .load()
            .writeStream.option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .foreachBatch(collect)
            .start()
        )
        query.awaitTermination()
    if not seen:
        raise SystemExit(f"the training read nothing from {topic} on {bootstrap}")
    gateway: Any = spark.sparkContext._gateway
    spark.stop()
    # The driver JVM exits when its standard input closes and writes the archive as it
    # exits: wait for that, so the caller finds the archive whole.
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=300)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
