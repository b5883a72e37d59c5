"""`read_archive` and `read_queue`: the message tables as Spark DataFrames.

The driver reads the lowest and highest id that match the filters and cuts that span
into `num_partitions` ranges of ids; each executor reads its range through SQLAlchemy,
a page of ids at a time, so any database the package supports works without a JDBC
driver. The schema is declared from the table (no inference pass); times are naive
UTC as stored, so they are `TimestampNTZType`, and headers are their JSON text.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.clock import to_naive_utc
from faststream_sqla.drivers.spark_scans import ScanReader, TableScan, scanned_columns
from faststream_sqla.exceptions import (
    DatabaseUnreachableError,
    InvalidOptionError,
    require_whole,
    shown,
)
from faststream_sqla.schema import (
    DEAD_STATES,
    MessageState,
    QueueTables,
    TableNames,
    validate_queue_name,
)
from faststream_sqla.spark._runner import after_failed_connect, executor_url, run_async
from faststream_sqla.urls import masked

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: the rows an executor reads per statement
PAGE_SIZE = 10_000
#: ids per partition when num_partitions is not given (and at least one per core)
IDS_PER_PARTITION = 250_000
MAX_PARTITIONS = 10_000

ARCHIVE_STATES = (MessageState.COMPLETED, *DEAD_STATES, MessageState.REDRIVEN)
LIVE_STATES = (
    MessageState.PENDING,
    MessageState.WAITING,
    MessageState.PROCESSING,
    MessageState.RETRYABLE,
)


@dataclass(frozen=True)
class _Scan:
    """A scan of one table and the database it reads (pickled to each task)."""

    url: str
    rows: TableScan


def read_archive(
    spark: SparkSession,
    url: str,
    *,
    queues: Iterable[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    states: Iterable[str | MessageState] | None = None,
    num_partitions: int | None = None,
    columns: Sequence[str] | None = None,
    message_table: str = "message",
    archive_table: str = "message_archive",
) -> DataFrame:
    """The archived messages (COMPLETED, FAILED, EXPIRED, REDRIVEN) as a DataFrame,
    filtered by queue, state and `since <= archived_at < until` (aware datetimes).
    `columns`: read only these (payloads are the bulk of most rows)."""
    scan = _scan(url, True, queues, since, until, states, columns, message_table, archive_table)
    return _read(spark, scan, num_partitions)


def read_queue(
    spark: SparkSession,
    url: str,
    *,
    queues: Iterable[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    states: Iterable[str | MessageState] | None = None,
    num_partitions: int | None = None,
    columns: Sequence[str] | None = None,
    message_table: str = "message",
    archive_table: str = "message_archive",
) -> DataFrame:
    """The messages not yet archived (PENDING, WAITING, PROCESSING, RETRYABLE) as a
    DataFrame, filtered by queue, state and `since <= created_at < until`. A snapshot
    per partition: messages move while it is read."""
    scan = _scan(url, False, queues, since, until, states, columns, message_table, archive_table)
    return _read(spark, scan, num_partitions)


def _scan(
    url: str,
    archive: bool,
    queues: Iterable[str] | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
    states: Iterable[str | MessageState] | None,
    columns: Sequence[str] | None,
    message_table: str,
    archive_table: str,
) -> _Scan:
    url = executor_url(url)
    if isinstance(queues, str):
        msg = f"queues must be a list of queue names, got the string {shown(queues)}"
        raise InvalidOptionError(msg)
    allowed = ARCHIVE_STATES if archive else LIVE_STATES
    chosen = None
    if states is not None:
        if isinstance(states, str):
            states = [states]
        chosen = []
        for state in states:
            name = state.value if isinstance(state, MessageState) else state
            if name not in {s.value for s in allowed}:
                msg = (
                    f"state {shown(state)} is not held by the {'archive' if archive else 'queue'}; "
                    f"choose from {', '.join(s.value for s in allowed)}"
                )
                raise InvalidOptionError(msg)
            chosen.append(name)
    names = TableNames(message_table, archive_table)
    only = None
    if columns is not None:
        tables = QueueTables(names)
        known = [c.name for c in (tables.archive if archive else tables.message).columns]
        if isinstance(columns, str) or not columns:
            msg = f"columns must be a non-empty list of column names, got {shown(columns)}"
            raise InvalidOptionError(msg)
        for name in columns:
            if name not in known:
                where = "archive" if archive else "queue"
                msg = (
                    f"columns: the {where} has no column {shown(name)}; "
                    f"its columns are {', '.join(known)}"
                )
                raise InvalidOptionError(msg)
        only = tuple(columns)
    rows = TableScan(
        only=only,
        names=names,
        archive=archive,
        queues=None if queues is None else tuple(validate_queue_name(q) for q in queues),
        since=_stored_time("since", since),
        until=_stored_time("until", until),
        states=None if chosen is None else tuple(chosen),
    )
    return _Scan(url, rows)


def _stored_time(name: str, value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or value.utcoffset() is None:
        msg = (
            f"{name} must be an aware datetime, e.g. datetime.now(timezone.utc), got {shown(value)}"
        )
        raise InvalidOptionError(msg)
    return to_naive_utc(value)


def _read(spark: SparkSession, scan: _Scan, num_partitions: int | None) -> DataFrame:
    if num_partitions is not None:
        require_whole("num_partitions", num_partitions, MAX_PARTITIONS)
    schema = spark_schema(scanned_columns(scan.rows, scan.url))
    low, high = run_async(lambda: _id_span(scan))
    if low is None or high is None:  # no rows: MIN and MAX are both NULL
        return spark.createDataFrame([], schema)
    if num_partitions is None:
        cores = spark.sparkContext.defaultParallelism
        num_partitions = min(
            MAX_PARTITIONS, max(cores, math.ceil((high - low + 1) / IDS_PER_PARTITION))
        )
    ranges = id_ranges(low, high, num_partitions)
    rdd = spark.sparkContext.parallelize(ranges, len(ranges)).flatMap(
        lambda span: _read_range(scan, span)
    )
    # Spark runs the reads when the DataFrame is used (an action), not here
    return spark.createDataFrame(rdd, schema, verifySchema=False)


async def _id_span(scan: _Scan) -> tuple[int | None, int | None]:
    engine = create_async_engine(scan.url)
    try:
        low, high = await ScanReader(engine, scan.rows).id_span()
    except Exception as e:
        await after_failed_connect(scan.url)
        if isinstance(e, (sa.exc.DBAPIError, OSError)):
            reason = e.orig if isinstance(e, sa.exc.DBAPIError) else e
            msg = f"cannot read {masked(scan.url)}: {type(reason).__name__}: {reason}"
            raise DatabaseUnreachableError(msg) from None
        raise
    finally:
        await engine.dispose()
    return low, high


def id_ranges(low: int, high: int, parts: int) -> list[tuple[int, int]]:
    """[low, high] cut into at most `parts` ranges [start, end) of nearly equal size."""
    span = high - low + 1
    parts = max(1, min(parts, span))
    step = span / parts
    bounds = [low + round(i * step) for i in range(parts)] + [high + 1]
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i] < bounds[i + 1]]


def spark_schema(columns: Sequence[sa.Column]) -> StructType:
    """The Spark schema of table columns, declared from their SQLAlchemy types."""
    from pyspark.sql import types as T

    def spark_type(column: sa.Column) -> Any:
        kind = column.type
        if isinstance(kind, sa.BigInteger):
            return T.LongType()
        if isinstance(kind, sa.Integer):  # SmallInteger too
            return T.IntegerType()
        if isinstance(kind, sa.DateTime):
            return T.TimestampNTZType()
        if isinstance(kind, sa.LargeBinary):
            return T.BinaryType()
        if isinstance(kind, (sa.String, sa.Enum, sa.JSON, sa.Text)):
            return T.StringType()
        raise TypeError(f"no Spark type for column {column.name} ({kind!r})")

    return T.StructType(
        [T.StructField(c.name, spark_type(c), nullable=bool(c.nullable)) for c in columns]
    )


# -- on the executors ----------------------------------------------------------------


def _read_range(scan: _Scan, span: tuple[int, int]) -> Iterator[tuple[Any, ...]]:
    """The rows of one id range, a page at a time, as tuples in schema order."""
    loop = asyncio.new_event_loop()
    engine = create_async_engine(scan.url)
    try:
        reader = ScanReader(engine, scan.rows)
        convert = [_converter(c) for c in reader.columns]
        start, end = span
        while start < end:
            page = loop.run_until_complete(reader.page(start, end, PAGE_SIZE))
            if page is None:
                return
            for values in page.rows:
                yield tuple(f(v) for f, v in zip(convert, values, strict=True))
            start = page.last_id + 1
    finally:
        loop.run_until_complete(engine.dispose())
        loop.close()


def _converter(column: sa.Column) -> Any:
    kind = column.type
    if isinstance(kind, sa.Enum):
        return lambda v: None if v is None else getattr(v, "value", v)
    if isinstance(kind, sa.JSON):
        return lambda v: None if v is None else json.dumps(v)
    if isinstance(kind, sa.LargeBinary):
        return lambda v: None if v is None else bytes(v)
    return _same


def _same(value: Any) -> Any:
    return value


__all__ = ["read_archive", "read_queue"]
