"""`faststream-sqla report`: the delivery report of the archive, computed with Spark.

pyspark is imported only when the command runs, so the rest of the CLI works without
the `spark` extra.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from faststream_sqla.exceptions import SqlaBrokerError
from faststream_sqla.schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE
from faststream_sqla.urls import mask_passwords, parse_url

from .common import (
    ArchiveTable,
    MessageTable,
    Url,
    app,
    err,
    fail,
    names_of,
    out,
    queue_name,
    usage_error,
)
from .operate import Since, Until, listing, time_range


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class Period(str, Enum):
    second = "second"
    minute = "minute"
    hour = "hour"
    day = "day"


#: the plot's period when --by is not given, by the span of the archive read: a few
#: hundred points at most
AUTO_PERIODS = ((300, Period.second), (5 * 3600, Period.minute), (14 * 86400, Period.hour))


@app.command()
def report(
    url: Url,
    since: Since = None,
    until: Until = None,
    queue: Annotated[
        list[str] | None, typer.Option("--queue", help="Only this queue (repeat for more).")
    ] = None,
    by: Annotated[
        Period | None,
        typer.Option(help="A row per queue and second, minute, hour or day archived."),
    ] = None,
    master: Annotated[
        str, typer.Option(help="Spark master: local[*] (this machine) or a cluster's URL.")
    ] = "local[*]",
    output_format: Annotated[
        Format, typer.Option("--format", help="How to print it.")
    ] = Format.table,
    plot: Annotated[
        Path | None,
        typer.Option(help="Also draw throughput and latency over time to this PNG file."),
    ] = None,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """How the archived messages fared, per queue: outcomes, attempts, latency
    percentiles (exact) and throughput, computed by Spark over the archive."""
    start, end = time_range(since, until)
    names = names_of(message_table, archive_table)
    for name in queue or ():
        queue_name(name)
    try:
        parse_url(url)
    except SqlaBrokerError as e:
        raise fail(str(e)) from None
    if plot is not None and plot.suffix.lower() != ".png":
        usage_error(f"--plot: {plot} must be a .png file")
    try:
        from pyspark.sql import SparkSession

        from faststream_sqla.spark import REPORT_INPUT, delivery_report, read_archive, spark_session
        from faststream_sqla.spark._errors import executor_errors
    except ImportError as e:
        raise fail(
            f"the report runs on Spark, which is not installed ({e}): "
            "pip install 'faststream-sqla[spark]' (and Java 17 or later)"
        ) from None

    owned = SparkSession.getActiveSession() is None
    try:
        spark = spark_session(master)
    except Exception as e:
        raise fail(f"cannot start Spark on {master}: {first_line(e)}") from None
    try:
        with executor_errors("reading the archive"):
            archive = read_archive(
                spark,
                url,
                queues=queue or None,
                since=start,
                until=end,
                columns=REPORT_INPUT,
                message_table=names.message,
                archive_table=names.archive,
            ).cache()
            rows = [r.asDict() for r in delivery_report(archive, by=by and by.value).collect()]
            series = _series(delivery_report, archive, by, rows) if plot is not None else []
            archive.unpersist()
    except SqlaBrokerError as e:
        raise fail(str(e)) from None
    except Exception as e:
        raise fail(f"the report failed: {first_line(e)}") from None
    finally:
        if owned:
            spark.stop()

    if not rows:
        err.print("No archived messages match.")
    elif output_format is Format.json:
        typer.echo(json.dumps([_plain(r) for r in rows], indent=2))
    elif output_format is Format.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(_plain(r) for r in rows)
    else:
        out.print(_table(rows))
    if plot is not None:
        if not series:
            err.print("Nothing to plot: no archived messages match.")
            return
        draw(series, plot)
        err.print(f"Plot written to {escape(str(plot))}")


def first_line(error: BaseException) -> str:
    lines = [ln for ln in str(error).splitlines() if ln.strip()]
    return mask_passwords(lines[0] if lines else type(error).__name__)


def _series(delivery_report: Any, archive: Any, by: Period | None, rows: list[dict]) -> list[dict]:
    """The report per period, for the plot: --by's period, or one that suits the span."""
    if not rows:
        return []
    if by is None:
        span = max(r["last_archived_at"] for r in rows) - min(r["first_archived_at"] for r in rows)
        by = next((p for limit, p in AUTO_PERIODS if span.total_seconds() <= limit), Period.day)
    if "period" in rows[0]:
        return rows
    return [r.asDict() for r in delivery_report(archive, by=by.value).collect()]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(rows: list[dict[str, Any]]) -> Any:
    periodic = "period" in rows[0]
    headers = [
        "queue",
        *(["period"] if periodic else []),
        "messages",
        "completed",
        "failed",
        "expired",
        "redriven",
        "failed %",
        "attempts mean/max",
        "p50 s",
        "p95 s",
        "p99 s",
        "msg/s",
    ]
    table = listing(*headers, first=[r["queue"] for r in rows])
    table.title = "Delivery report: latency from creation to archive"
    for column in table.columns[2 if periodic else 1 :]:
        column.justify = "right"
    for r in rows:
        table.add_row(
            escape(r["queue"]),
            *([r["period"].strftime("%Y-%m-%d %H:%M")] if periodic else []),
            f"{r['messages']:,}",
            f"{r['completed']:,}",
            f"{r['failed']:,}",
            f"{r['expired']:,}",
            f"{r['redriven']:,}",
            f"{r['failure_rate']:.1%}",
            f"{r['mean_attempts']:.2f} / {r['max_attempts']}",
            *(_number(r[f"latency_{p}_s"]) for p in ("p50", "p95", "p99")),
            _number(r["throughput_per_s"], 1),
        )
    return table


def draw(series: list[dict[str, Any]], path: Path) -> None:
    """Throughput and latency (p50, p95) per period and queue, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    figure, (throughput, latency) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for queue in sorted({r["queue"] for r in series}):
        points = sorted((r for r in series if r["queue"] == queue), key=lambda r: r["period"])
        times = [r["period"] for r in points]
        (line,) = throughput.plot(
            times, [r["throughput_per_s"] for r in points], marker=".", label=queue
        )
        color = line.get_color()  # one colour per queue in both panels
        for percentile, style in (("p50", {"marker": "."}), ("p95", {"linestyle": "--"})):
            latency.plot(
                times,
                [r[f"latency_{percentile}_s"] for r in points],
                color=color,
                label=f"{queue} {percentile}",
                **style,
            )
    times = sorted({r["period"] for r in series})
    if len(times) == 1:  # one point: show the period around it, not an axis of years
        throughput.set_xlim(times[0] - timedelta(seconds=30), times[0] + timedelta(seconds=30))
    throughput.set_ylabel("messages / s")
    throughput.set_title("Archived messages: throughput and latency (UTC)")
    latency.set_ylabel("created → archived (s)")
    for axes in (throughput, latency):
        axes.grid(True, alpha=0.3)
        axes.legend(loc="best", fontsize="small")
    figure.autofmt_xdate()
    figure.tight_layout()
    try:
        figure.savefig(path, format="png", dpi=100)
    except OSError as e:
        raise fail(f"cannot write the plot to {path}: {e.strerror or e}") from None
    finally:
        plt.close(figure)
