"""Spark's release: the sorter's rows as Spark SQL in the JVM, for what the driver must
not hold (job.py decides when).

* :func:`parse_rows` — the rows of the changes topic as the columns the sorter decides on
  (the same as driver_rows.parse gives: tests/integration/test_sorter_parse.py);
* :meth:`SparkRelease.stage` — a batch too big for the driver parsed and written whole as
  its segment (statistics and resolved marks observed on the way): one Spark job;
* :meth:`SparkRelease.release` — every complete transaction of a window from the pending
  segments, sorted in one partition (Spark's external sort, with spill) and written with
  Spark's Kafka writer between begin/commit markers, a staged batch's dead letters in the
  same write: one Spark job (a window where one commit_ts holds more changes than the
  driver may hold comes here too, from segments the driver wrote);
* :meth:`SparkRelease.compact` — many pending segments merged into one.

Completeness is decided by window functions per transaction (no join): the count, the
min/max of count, and whether every row in seq order is the row_number-th.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import Window as SparkWindow
from pyspark.sql import functions as F

from crossfeed import dlq
from crossfeed.feeds import FeedSpec
from crossfeed.services.sorter import rules
from crossfeed.services.sorter.report import Released
from crossfeed.services.sorter.rules import Segment, Window
from crossfeed.services.sorter.segments import Store, batch_segment
from crossfeed.wire import grammar, headers, topics

log = logging.getLogger(__name__)

# Spark SQL's forms of the grammar (crossfeed/wire/grammar.py); a 19-digit commit_ts or
# offset is compared with MAX_LONG as text (cast("long") would fail on an overflow).
TXN_RE = grammar.TXN.java()
PROV_RE = grammar.PROV.java()
SRC_RE = grammar.SRC.java()  # the legacy form of a change copied by an older puller
MARK_KEY_RE = grammar.MARK_KEY.java()
TS_RE = grammar.COMMIT_TS.java()
MAX_LONG_TEXT = str(grammar.MAX_LONG)
UNREADABLE_TXN = f"{headers.TXN} and {headers.PROV} unreadable"

# Writer defaults measured here: 55k rec/s Kafka-to-Kafka vs 33-44k with the client's.
WRITER_DEFAULTS = {
    "kafka.linger.ms": "5",
    "kafka.batch.size": "262144",
    "kafka.max.request.size": str(64 << 20),
}


def _header(name: str) -> Column:
    """The first value of header ``name`` as a string (null when absent)."""
    return F.expr(f"try_element_at(filter(headers, h -> h.key = '{name}'), 1).value").cast("string")


def _bin(text: Column | str) -> Column:
    col = F.lit(text) if isinstance(text, str) else text
    return col.cast("binary")


def _h(name: str, value: Column | str) -> Column:
    return F.struct(F.lit(name).alias("key"), _bin(value).alias("value"))


def parse_rows(df: DataFrame) -> DataFrame:
    """Rows of the changes topic -> the columns the sorter decides on (the grammar of
    crossfeed/wire/grammar.py; the columns of driver_rows.SCHEMA).

    In stages, each header looked up once: Spark does not inline a non-trivial column
    into several uses, so the header search and the regexes run once per row (one big
    expression repeated them and cost more in code generation than in work)."""
    col = F.col
    step1 = df.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        F.expr("unix_millis(timestamp)").alias("timestamp_ms"),
        _header(headers.TYPE).alias("h_type"),
        _header(headers.COMMIT_TS).alias("h_ts"),
        _header(headers.TXN).alias("h_txn"),
        _header(headers.PROV).alias("h_prov"),
        _header(headers.SRC).alias("h_src"),
    )
    step2 = step1.select(
        "*",
        F.when(
            col("h_ts").rlike(TS_RE)
            & ((F.length("h_ts") < grammar.LONG_DIGITS) | (col("h_ts") <= F.lit(MAX_LONG_TEXT))),
            col("h_ts").cast("long"),
        ).alias("commit_ts"),
        F.when(col("h_prov").rlike(PROV_RE), F.split(col("h_prov"), "/")).alias("prov_parts"),
        F.when(col("h_src").rlike(SRC_RE), F.split(col("h_src"), "/")).alias("src_parts"),
        F.when(col("h_txn").rlike(TXN_RE), F.split(col("h_txn"), "/")).alias("txn_parts"),
    )
    # The source record's cluster.id, topic, partition, offset: crossfeed-prov's last hop
    # and the three fields after it, else a legacy crossfeed-src's four.
    prov = col("prov_parts")
    step2b = step2.select(
        "*",
        F.coalesce(
            F.when(
                prov.isNotNull(),
                F.array(
                    F.substring_index(F.get(prov, 0), ",", -1),
                    F.get(prov, 1),
                    F.get(prov, 2),
                    F.get(prov, 3),
                ),
            ),
            col("src_parts"),
        ).alias("source"),
    )
    src, txn = col("source"), col("txn_parts")
    no_txn = col("h_txn").isNull()
    step3 = step2b.select(
        "*",
        F.when(no_txn & src.isNotNull(), F.concat_ws(":", src))
        .when(txn.isNotNull(), F.get(txn, 0))
        .alias("txn_id"),
        F.when(no_txn, F.lit(1)).when(txn.isNotNull(), F.get(txn, 1).cast("int")).alias("seq"),
        F.when(no_txn, F.lit(1)).when(txn.isNotNull(), F.get(txn, 2).cast("int")).alias("count"),
    )
    typ, commit_ts = col("h_type"), col("commit_ts")
    key_text = col("key").cast("string")
    error = (
        F.when(
            typ == headers.TYPE_RESOLVED,
            F.when(
                key_text.isNull() | ~key_text.rlike(MARK_KEY_RE),
                F.lit("resolved mark key is not topic/partition"),
            ).when(commit_ts.isNull(), F.lit(f"resolved mark without a valid {headers.COMMIT_TS}")),
        )
        .when(typ.isNotNull(), F.concat(F.lit(f"unknown {headers.TYPE} "), typ))
        .when(commit_ts.isNull(), F.lit(f"no valid {headers.COMMIT_TS} header"))
        .when(col("txn_id").isNull(), F.lit(UNREADABLE_TXN))
        .when(
            (col("seq") < 1) | (col("seq") > col("count")),
            F.lit(f"{headers.TXN} seq outside 1..count"),
        )
    )
    step4 = step3.select("*", error.alias("error"))
    kind = (
        F.when(col("error").isNotNull(), F.lit("bad"))
        .when(typ == headers.TYPE_RESOLVED, F.lit("mark"))
        .otherwise(F.lit("data"))
    )
    return step4.select(
        "key",
        "value",
        "headers",
        "timestamp_ms",
        kind.alias("kind"),
        "commit_ts",
        F.when(typ == headers.TYPE_RESOLVED, key_text).alias("part"),
        "txn_id",
        "seq",
        "count",
        F.coalesce(F.get(src, 0), F.lit("")).alias("src_cluster"),
        F.coalesce(F.get(src, 1), col("topic")).alias("src_topic"),
        F.coalesce(F.get(src, 2).cast("int"), col("partition")).alias("src_partition"),
        # 19 digits may be over a long: then the staging offset (a cast would fail the batch)
        F.coalesce(F.get(src, 3).try_cast("long"), col("offset")).alias("src_offset"),
        "error",
    )


@dataclass(frozen=True)
class Staged:
    """A micro-batch parsed by Spark and written whole as segment ``name`` (its marks and
    bad rows too: the release dead-letters the bad and late ones from there)."""

    name: str
    rows: int
    mark_rows: int
    marks: dict[str, int]  # the newest resolved_ts per source partition among its marks
    segment: Segment | None  # its data rows as a pending segment (None: it has none)
    bad_rows: int  # unreadable rows, and data rows at or below R_prev (late)


@dataclass
class SparkRelease:
    """Batches the driver must not hold, parsed, sorted and written by Spark jobs; and
    the compaction of pending segments. It does what the job (job.py) tells it and
    returns what it did."""

    spark: SparkSession
    feed: FeedSpec
    store: Store
    kafka_options: dict[str, str]
    sorted_topic: str

    def stage(self, df: DataFrame, batch_id: int, prev_resolved_ts: int) -> Staged:
        """One Spark job: the batch's rows parsed and written as its segment, with its
        statistics and marks observed on the way (every Spark action costs 0.2-1 s here,
        whatever its size); ``prev_resolved_ts`` (R_prev) says which data rows are late."""
        name = batch_segment(batch_id)
        kind, ts = F.col("kind"), F.col("commit_ts")
        seen = Observation(f"segment-{batch_id}")
        observed = parse_rows(df).observe(
            seen,
            F.count(F.lit(1)).alias("rows"),
            F.count_if(kind == "data").alias("data"),
            F.count_if(kind == "bad").alias("bad"),
            F.count_if((kind == "data") & (ts <= F.lit(prev_resolved_ts))).alias("late"),
            F.max(F.when(kind == "data", ts)).alias("max_data_ts"),
            # One entry per mark: marks are few (a source partition's commits, ~10/s).
            F.collect_list(F.when(kind == "mark", F.struct("part", ts))).alias("marks"),
        )
        # Dictionary encoding of keys and values only cost CPU (hash maps of unique bytes).
        observed.write.mode("overwrite").option("parquet.enable.dictionary", "false").parquet(
            self.store.segment_path(name)
        )
        stats = observed_metrics(seen, f"batch {batch_id}'s segment")
        data_rows = int(stats["data"])
        return Staged(
            name=name,
            rows=int(stats["rows"]),
            mark_rows=len(stats["marks"]),
            marks=rules.max_marks((m["part"], int(m["commit_ts"])) for m in stats["marks"]),
            segment=Segment(name, int(stats["max_data_ts"]), data_rows) if data_rows else None,
            bad_rows=int(stats["bad"]) + int(stats["late"]),
        )

    def release(
        self, batch_id: int, window: Window, pending: list[Segment], batch: Staged | None
    ) -> Released:
        """Every transaction of ``window`` from the ``pending`` segments and ``batch``'s
        (None: the batch is in ``pending`` already, or has nothing to release), and the
        batch's bad and late rows as dead letters: one Spark job, one Kafka write, done
        when it returns. A batch's segment with no data rows is garbage once read."""
        out = Released(segments=list(pending))
        bad_rows, fresh = 0, ""
        if batch is not None:
            if batch.segment is not None:
                out.segments.append(batch.segment)
            else:
                out.garbage.append(batch.name)
            bad_rows, fresh = batch.bad_rows, batch.name
        if not window.empty or bad_rows:
            released = out.segments if not window.empty else []
            out.events, out.txns, out.dead_letters = self._write(
                batch_id, released, fresh, window, bad_rows
            )
        return out

    def _write(
        self, batch_id: int, segments: list[Segment], new: str, window: Window, bad_rows: int
    ) -> tuple[int, int, int]:
        """One Spark job, one Kafka write: released transactions in order into `.sorted`,
        dead letters into the DLQ. Returns (events, transactions, dead letters), observed
        on the rows written."""
        kind, ts = F.col("kind"), F.col("commit_ts")
        arrived_late = f" arrived after the feed's resolved_ts {window.prev_resolved_ts}"
        parts: list[DataFrame] = []
        if segments:
            pending = self.spark.read.parquet(*(self.store.segment_path(s.name) for s in segments))
            rel = pending.filter(
                (kind == "data")
                & (ts > F.lit(window.prev_resolved_ts))
                & (ts <= F.lit(window.resolved_ts))
            )
            # The one shuffle: everything released into one partition, sorted there (with
            # spill). The window per transaction keeps that order, so the rows reach the
            # writer as (commit_ts, txn, seq) with no second sort.
            ordered = rel.repartition(1).sortWithinPartitions("commit_ts", "txn_id", "seq")
            parts.append(self._transactions(self._completeness(ordered), window))
        if bad_rows:
            fresh = self.spark.read.parquet(self.store.segment_path(new))
            late = fresh.filter(
                (kind == "bad") | ((kind == "data") & (ts <= F.lit(window.prev_resolved_ts)))
            )
            parts.append(
                late.select(
                    self._dead_letter(
                        F.when(kind == "bad", F.lit("UnreadableChange")).otherwise(
                            F.lit("LateChange")
                        ),
                        F.when(kind == "bad", F.col("error")).otherwise(
                            F.concat(
                                F.lit("commit_ts "),
                                ts.cast("string"),
                                F.lit(arrived_late),
                            )
                        ),
                    ).alias("o")
                ).select("o.*")
            )
        if not parts:
            return 0, 0, 0
        out = parts[0]
        for extra in parts[1:]:
            out = out.unionByName(extra)
        written = Observation(f"release-{batch_id}")
        (
            out.observe(
                written,
                F.count_if(kind == "data").alias("events"),
                F.count_if((kind == "data") & (F.col("ord") == 1)).alias("txns"),
                F.count_if(kind == "dlq").alias("dead_letters"),
            )
            .select("topic", "key", "value", "headers")
            .write.mode("append")
            .format("kafka")
            .options(**self.kafka_options)
            .options(**WRITER_DEFAULTS)
            .save()
        )
        counts = observed_metrics(written, f"batch {batch_id}'s release")
        return int(counts["events"]), int(counts["txns"]), int(counts["dead_letters"])

    @staticmethod
    def _completeness(rel: DataFrame) -> DataFrame:
        """``rel`` with ``ok`` (its transaction is complete, rule D of rules.py) and ``n``
        (the transaction's changes in the window), by window functions over the
        transaction — (commit_ts, txn id): changes of one txn id at different commit_ts
        are different transactions, each incomplete. Its rows in seq order are seq 1..count
        exactly once when every one is the row_number-th and there are count of them with
        one count. (Sums of seq and of seq² do not say it: 1,1,4,5,5,6,6,8 has those of
        1..8.) ``rel`` sorted by (commit_ts, txn_id, seq) in one partition needs no further
        shuffle or sort for it."""
        txn = SparkWindow.partitionBy("commit_ts", "txn_id")
        placed = rel.select(
            "*",
            (F.col("seq") == F.row_number().over(txn.orderBy("seq"))).alias("in_place"),
        )
        agg = placed.select(
            "*",
            F.count(F.lit(1)).over(txn).alias("n"),
            F.min("count").over(txn).alias("cmin"),
            F.max("count").over(txn).alias("cmax"),
            F.min(F.col("in_place").cast("int")).over(txn).alias("all_in_place"),
        )
        # One commit_ts per group by construction (one commit_ts of the rule).
        ok = (
            (F.col("cmin") == F.col("cmax"))
            & (F.col("n") == F.col("cmax"))
            & (F.col("all_in_place") == 1)
        )
        return agg.select(*rel.columns, ok.alias("ok"), "n")

    def _transactions(self, flagged: DataFrame, window: Window) -> DataFrame:
        """Rows of the release window, flagged by :meth:`_completeness` -> data rows of
        complete transactions, each with its place in it (``crossfeed-order``, the inline
        form of docs/ordered-feeds.md §3, as the driver's release writes them), and dead
        letters (incomplete ones), in the order of ``flagged``."""
        place = F.concat_ws(
            "/",
            F.col("seq").cast("string"),
            F.col("count").cast("string"),
            F.col("commit_ts").cast("string"),
            F.col("txn_id"),
        )
        data = self._row(
            self.sorted_topic,
            F.col("key"),
            F.col("value"),
            F.concat(
                F.col("headers"),
                F.array(
                    _h(headers.TIMESTAMP, F.col("timestamp_ms").cast("string")),
                    _h(headers.ORDER, place),
                ),
            ),
            F.col("seq").cast("long"),
            "data",
        )
        letter = self._dead_letter(
            F.lit("IncompleteTransaction"),
            F.concat(
                F.lit("transaction "),
                F.col("txn_id"),
                F.lit(" has "),
                F.col("n").cast("string"),
                F.lit(" changes (seq/count not 1..count exactly once, or commit_ts differs) "),
                F.lit(f"when the feed's resolved_ts reached {window.resolved_ts}"),
            ),
        )
        return flagged.select(F.when(F.col("ok"), data).otherwise(letter).alias("o")).select("o.*")

    def _row(
        self,
        topic: str,
        key: Column,
        value: Column,
        hdrs: Column,
        ord_: Column,
        kind: str,
    ) -> Column:
        return F.struct(
            F.lit(topic).alias("topic"),
            key.alias("key"),
            value.alias("value"),
            hdrs.alias("headers"),
            F.col("commit_ts").alias("commit_ts"),
            F.col("txn_id").alias("txn_id"),
            ord_.cast("long").alias("ord"),
            F.lit(kind).alias("kind"),
        )

    def _dead_letter(self, error_class: Column, message: Column) -> Column:
        context = F.array(
            _h(dlq.FEED, self.feed.name),
            _h(dlq.CLUSTER, F.col("src_cluster")),
            _h(dlq.TOPIC, F.col("src_topic")),
            _h(dlq.PARTITION, F.col("src_partition").cast("string")),
            _h(dlq.OFFSET, F.col("src_offset").cast("string")),
            _h(dlq.STAGE, "sorter"),
            _h(dlq.ERROR_CLASS, error_class),
            _h(dlq.ERROR_MESSAGE, message),
        )
        return self._row(
            topics.DLQ,
            F.col("key"),
            F.col("value"),
            F.concat(F.coalesce(F.col("headers"), F.array().cast(context_type())), context),
            F.lit(0).cast("long"),
            "dlq",
        )

    def compact(self, segments: list[Segment], batch_id: int, resolved_ts: int) -> Segment:
        """``segments``' rows above ``resolved_ts`` as one new segment (two Spark jobs);
        the segments themselves are left as they are."""
        name = f"merged-{batch_id:012d}"
        path = self.store.segment_path(name)
        pending = self.spark.read.parquet(*(self.store.segment_path(s.name) for s in segments))
        kind, ts = F.col("kind"), F.col("commit_ts")
        pending.filter((kind == "data") & (ts > F.lit(resolved_ts))).write.mode("overwrite").option(
            "parquet.enable.dictionary", "false"
        ).parquet(path)
        row = (
            self.spark.read.parquet(path)
            .agg(F.max("commit_ts").alias("max_ts"), F.count(F.lit(1)).alias("rows"))
            .collect()[0]
        )
        rows = int(row["rows"])
        max_ts = int(row["max_ts"]) if row["max_ts"] is not None else rules.NOTHING_RELEASED
        log.info("compacted %d pending segments into %s (%d changes)", len(segments), name, rows)
        return Segment(name, max_ts, rows)


OBSERVED_TIMEOUT_S = 120.0


def observed_metrics(observation: Observation, what: str) -> dict[str, Any]:
    """The metrics Spark observed during the action just run; an error, not a hang, if
    they never arrive (Observation.get waits forever: the batch fails and is replayed)."""
    out: list[dict[str, Any]] = []
    waiter = threading.Thread(target=lambda: out.append(observation.get), daemon=True)
    waiter.start()
    waiter.join(OBSERVED_TIMEOUT_S)
    if not out:
        raise RuntimeError(
            f"Spark reported no observed metrics for {what} in {OBSERVED_TIMEOUT_S:.0f} s"
        )
    return out[0]


def use_v2_kafka_writer(spark: SparkSession) -> None:
    """Write Kafka through Spark's DataSource V2 path: the V1 path (Spark's default for
    kafka) runs the write as a nested query whose observed metrics never reach
    Observation.get, which then waits forever."""
    key = "spark.sql.sources.useV1SourceList"
    sources = [s.strip() for s in (spark.conf.get(key) or "").split(",") if s.strip()]
    spark.conf.set(key, ",".join(s for s in sources if s.lower() != "kafka"))


def context_type() -> str:
    return "array<struct<key:string,value:binary>>"
