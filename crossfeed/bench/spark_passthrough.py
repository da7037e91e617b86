"""Spark's own Kafka-to-Kafka pass-through: the reference the sorter is measured against.

``python -m crossfeed.bench.spark_passthrough SOURCE TOPIC TARGET OUT CHECKPOINT`` copies
every record of TOPIC on SOURCE to OUT on TARGET (key, value, headers) with Structured
Streaming, with the sorter's Spark settings and jars, until it is stopped. No ordering, no
state: the most any Spark job here can move through these brokers.
"""

from __future__ import annotations

import os
import sys

from crossfeed.config.settings import SorterSettings
from crossfeed.services.sorter import sparkconf


def main(source: str, topic: str, target: str, out: str, checkpoint: str) -> None:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = SorterSettings()  # type: ignore[call-arg]
    builder = SparkSession.builder
    for key, value in sparkconf.spark_conf(settings, "bench", sparkconf.jars()).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    read = spark.readStream.format("kafka")
    for key, value in sparkconf.kafka_options({"bootstrap.servers": source}, {}).items():
        read = read.option(key, value)  # already kafka.-prefixed
    frame = (
        read.option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        .load()
        .selectExpr("key", "value", "headers")
    )
    query = (
        frame.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", target)
        .option("kafka.linger.ms", "5")
        .option("kafka.batch.size", "262144")
        .option("topic", out)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:6])
