"""Spark and Kafka options for the sorter, from crossfeed settings (no Spark import here).

Spark runs on loopback and out of the checkout by default: no UI, the driver bound to
127.0.0.1, scratch space under ``$CROSSFEED_HOME/sorter/tmp``. The Kafka connector's jars
come from ``$CROSSFEED_HOME/lib/spark.classpath`` (``make setup``) unless the job runs
under ``spark-submit`` (then its ``--jars``/``--packages`` provide them).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from crossfeed import class_archive, paths
from crossfeed.config.settings import SorterSettings
from crossfeed.kafka.client_overrides import for_client
from crossfeed.wire import topics

STAGING_MAX_MESSAGE_BYTES = topics.STAGING_MAX_MESSAGE_BYTES


class SetupError(RuntimeError):
    """Something Spark needs is missing; the message says what to do."""


def under_spark_submit() -> bool:
    """True when spark-submit started this Python (the JVM and its jars already exist)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return
    if shutil.which("java") is None:
        raise SetupError(
            "no Java found (java is not on PATH and JAVA_HOME is not set): the sorter runs "
            "Spark, which needs a JDK 17 or 21; install one (e.g. apt-get install "
            "openjdk-17-jre-headless)"
        )


def jars(home: Path | None = None) -> list[str]:
    """The Kafka connector's jars (``make setup``), or SetupError saying what to run.

    Without ``home``: ``paths.lib_dir`` — the jars of ``$CROSSFEED_HOME`` when its ``lib``
    says anything of them, else the checkout's, as for Kafka's."""
    lib = home / "lib" if home is not None else paths.lib_dir("spark.classpath", "spark.missing")
    missing = lib / "spark.missing"
    if missing.exists():
        raise SetupError(
            f"{missing.read_text().strip()}; the sorter needs Spark's Kafka connector "
            "(fix the Maven access and run 'make setup' again)"
        )
    listing = lib / "spark.classpath"
    if not listing.exists():
        raise SetupError(
            f"{listing} not found: run 'make setup' to fetch Spark's Kafka connector jars, "
            "or run the sorter under spark-submit with --packages "
            "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
        )
    found = [j.strip() for j in listing.read_text().strip().split(",") if j.strip()]
    absent = [j for j in found if not Path(j).exists()]
    if not found or absent:
        raise SetupError(f"{listing} names jars that do not exist ({absent}): run 'make setup'")
    return found


def checkpoint_root(settings: SorterSettings, feed: str) -> Path:
    base = Path(settings.checkpoint_dir) if settings.checkpoint_dir else paths.home() / "sorter"
    return base / feed


def spark_defaults() -> dict[str, str]:
    """``spark-defaults.conf`` of ``$SPARK_CONF_DIR`` (else ``$SPARK_HOME/conf``), if any."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"]) / "conf") if os.environ.get("SPARK_HOME") else None
    )
    out: dict[str, str] = {}
    if conf_dir is None or not (Path(conf_dir) / "spark-defaults.conf").exists():
        return out
    for line in (Path(conf_dir) / "spark-defaults.conf").read_text().splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("#"):
            out[parts[0]] = parts[1].strip()
    return out


def effective_master(settings: SorterSettings) -> str | None:
    """``sorter.spark_master``, else spark-defaults.conf's ``spark.master``, else local[*];
    None under spark-submit, whose ``--master`` holds."""
    if under_spark_submit():
        return None
    return settings.spark_master or spark_defaults().get("spark.master") or "local[*]"


def is_local(settings: SorterSettings) -> bool:
    """Whether the job runs on a local master (then Spark is kept on loopback). Under
    spark-submit it is not ours to say: its options and spark-defaults.conf hold."""
    master = effective_master(settings)
    return master is not None and master.startswith("local")


JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def driver_classpath(jar_list: list[str]) -> str:
    """What a local driver JVM loads its classes from: the pyspark install (its jars) and
    the Kafka connector's jars; names the driver's class archive."""
    dist = importlib.metadata.distribution("pyspark")
    return f"{dist.locate_file('pyspark')}=={dist.version};{','.join(jar_list)}"


def spark_conf(settings: SorterSettings, feed: str, jar_list: list[str]) -> dict[str, str]:
    """Spark properties: crossfeed's defaults, then ``sorter.spark_conf`` over them.

    On a local master Spark stays on loopback (driver host and bind address 127.0.0.1);
    on a cluster the driver's address comes from spark-defaults.conf or ``spark_conf``.
    """
    local = is_local(settings)
    scratch = paths.home() / "sorter" / "tmp"
    conf = {
        "spark.app.name": f"crossfeed-sorter-{feed}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        # Micro-batches are small jobs: don't let every one wait for locality.
        "spark.locality.wait": "0s",
        "spark.sql.streaming.minBatchesToRetain": "20",
        # The checkpoint is on the driver's local disk (checkpoint_root). Spark's default
        # manager (Hadoop FileContext) took 80-160 ms to write each of a batch's two log
        # files, the offsets before the batch and the commit after it; the FileSystem one
        # takes 10-20 ms. On a local disk both write a temporary file and rename it.
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
    }
    # Under spark-submit its --master holds: a master set here would override it (a
    # SparkSession's options win over the JVM's), and the job would run in local[*].
    master = effective_master(settings)
    if master is not None:
        conf["spark.master"] = master
    if jar_list:
        conf["spark.jars"] = ",".join(jar_list)
    if local:  # on a cluster these come from spark-defaults.conf or sorter.spark_conf
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.local.dir"] = str(scratch)
        conf["spark.pyspark.python"] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
        # The JVM's optimizing compiler (C2) took a whole core for minutes after start,
        # beside two brokers on two cores; the first tier alone cut the lag at half load
        # by a third in the benchmark's ordered runs. Executors on a cluster keep their defaults.
        # With the class archive ``make setup`` recorded the driver starts in about half
        # the CPU (crossfeed/class_archive.py).
        archive = class_archive.jvm_options("spark-driver", driver_classpath(jar_list))
        conf["spark.driver.extraJavaOptions"] = " ".join([JIT_OPTIONS, *archive])
    conf.update(settings.spark_conf)
    return conf


def kafka_options(cluster: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """Java Kafka client properties (``kafka.``-prefixed for Spark) from a cluster's
    librdkafka properties as a consumer sees them (``consumer.*`` overrides applied):
    bootstrap servers, security protocol, SASL and a PEM CA pass over; anything else
    goes in ``sorter.kafka_options``."""
    cluster = for_client(cluster, "consumer")  # Spark's Kafka source only reads
    out = {"bootstrap.servers": cluster["bootstrap.servers"]}
    protocol = cluster.get("security.protocol")
    if protocol:
        out["security.protocol"] = protocol.upper()
    mechanism = cluster.get("sasl.mechanism") or cluster.get("sasl.mechanisms")
    if mechanism:
        out["sasl.mechanism"] = mechanism.upper()
    user, password = cluster.get("sasl.username"), cluster.get("sasl.password")
    if user is not None and password is not None:
        module = (
            "org.apache.kafka.common.security.scram.ScramLoginModule"
            if (mechanism or "").upper().startswith("SCRAM")
            else "org.apache.kafka.common.security.plain.PlainLoginModule"
        )
        escaped_user = user.replace('"', '\\"')
        escaped_password = password.replace('"', '\\"')
        out["sasl.jaas.config"] = (
            f'{module} required username="{escaped_user}" password="{escaped_password}";'
        )
    if cluster.get("ssl.ca.location"):
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = cluster["ssl.ca.location"]
    out.update(extra)
    return {f"kafka.{k}": v for k, v in out.items()}


def read_task_options(max_records_per_task: int, min_tasks: int) -> dict[str, str]:
    """The Kafka source's options cutting each micro-batch's read into Spark tasks. Every
    task costs every batch (its launch, a Kafka fetch, its result back), so a steady feed's
    small batches are read in one task per staging partition; a batch catching up, whose
    read is most of its time, is cut into pieces of at most ``max_records_per_task``, read
    side by side (a Debezium feed has one staging partition). ``min_tasks`` forces a
    minimum whatever the batch (0: none)."""
    options = {}
    if max_records_per_task > 0:
        options["maxRecordsPerPartition"] = str(max_records_per_task)
    if min_tasks > 0:
        options["minPartitions"] = str(min_tasks)
    return options
