"""`delivery_report`: how the archived messages of each queue fared.

Per queue, and optionally per second, minute, hour or day of `archived_at`: how many messages
settled and how (completed, failed, expired, redriven), the failure rate, attempts,
the latency from creation to archive at p50/p95/p99 (exact percentiles, interpolated
between the two nearest values as numpy does by default) and the throughput.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import MessageState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: the periods a report can be split by, and their length in seconds
PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
PERCENTILES = (0.5, 0.95, 0.99)
#: the archive's columns a report reads: `read_archive(..., columns=REPORT_INPUT)`
#: leaves the payloads in the database
REPORT_INPUT = ("queue", "state", "attempts_count", "created_at", "archived_at")
#: the report's columns after queue (and period), in order
REPORT_COLUMNS = (
    "messages",
    "completed",
    "failed",
    "expired",
    "redriven",
    "failure_rate",
    "mean_attempts",
    "max_attempts",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "first_archived_at",
    "last_archived_at",
    "throughput_per_s",
)


def delivery_report(archive_df: DataFrame, *, by: str | None = None) -> DataFrame:
    """One row per queue (and per period of `archived_at` when `by` is "second",
    "minute", "hour" or "day"), ordered by queue then period.

    `failure_rate` is failed / messages. Latencies are in seconds from `created_at` to
    `archived_at` (a redriven message's clock restarts with its copy). `throughput_per_s`
    is messages per second: over the period when `by` is given, else over the span from
    the first to the last archive of the queue (null when that span is zero).
    """
    from pyspark.sql import functions as F

    if by is not None and by not in PERIODS:
        msg = f"by must be one of {', '.join(PERIODS)} or None, got {shown(by)}"
        raise InvalidOptionError(msg)
    missing = set(REPORT_INPUT) - set(archive_df.columns)
    if missing:
        lacking = ", ".join(sorted(missing))
        msg = f"archive_df lacks the columns {lacking}: pass read_archive()'s DataFrame"
        raise InvalidOptionError(msg)

    def count_of(state: MessageState):
        return F.sum(F.when(F.col("state") == state.value, 1).otherwise(0)).cast("long")

    latency = F.expr("timestampdiff(MICROSECOND, created_at, archived_at)") / F.lit(1_000_000.0)
    df = archive_df.withColumn("_latency", latency)
    keys = [F.col("queue")]
    if by is not None:
        df = df.withColumn("period", F.date_trunc(by, F.col("archived_at")))
        keys.append(F.col("period"))
    quantiles = F.percentile("_latency", F.array(*(F.lit(p) for p in PERCENTILES)))
    grouped = df.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("messages"),
        count_of(MessageState.COMPLETED).alias("completed"),
        count_of(MessageState.FAILED).alias("failed"),
        count_of(MessageState.EXPIRED).alias("expired"),
        count_of(MessageState.REDRIVEN).alias("redriven"),
        F.avg("attempts_count").alias("mean_attempts"),
        F.max("attempts_count").alias("max_attempts"),
        quantiles.alias("_p"),
        F.min("archived_at").alias("first_archived_at"),
        F.max("archived_at").alias("last_archived_at"),
    )
    span_s = F.expr("timestampdiff(MICROSECOND, first_archived_at, last_archived_at)") / F.lit(
        1_000_000.0
    )
    window = F.lit(float(PERIODS[by])) if by is not None else span_s
    report = (
        grouped.withColumn("failure_rate", F.col("failed") / F.col("messages"))
        .withColumn("latency_p50_s", F.col("_p")[0])
        .withColumn("latency_p95_s", F.col("_p")[1])
        .withColumn("latency_p99_s", F.col("_p")[2])
        .withColumn(
            "throughput_per_s",
            F.when(window > 0, F.col("messages") / window),
        )
    )
    names = ["queue", *(["period"] if by is not None else []), *REPORT_COLUMNS]
    return report.select(*names).orderBy(*names[: 2 if by is not None else 1])


__all__ = ["REPORT_INPUT", "delivery_report"]
