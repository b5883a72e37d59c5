"""`publish_dataframe`: every row of a Spark DataFrame becomes a message.

Each partition is written by the executor that holds it, through a `SqlaBroker` of its
own and its `publish_batch` (the one insert path of the package: validation, keys,
ordering holds, wake-ups), one transaction per batch. Spark retries failed tasks and may
run a task twice (speculation), so every message carries an idempotency key: the
caller's column, or a hash of the queue, the `job_key` and the row's content. A second
attempt, or a second run of the job, finds its keys held and writes nothing for them.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faststream_sqla.drivers.base import reading
from faststream_sqla.drivers.probe import database_now
from faststream_sqla.drivers.spark_publish_reads import (
    ArchivedKeysQuery,
    archived_keys,
    ids_correlated,
)
from faststream_sqla.exceptions import (
    InvalidOptionError,
    MessageSerializationError,
    SqlaBrokerError,
    require_whole,
    shown,
)
from faststream_sqla.options import Envelope
from faststream_sqla.schema import TableNames, validate_queue_name
from faststream_sqla.spark._errors import executor_errors
from faststream_sqla.spark._runner import after_failed_connect, executor_url, run_async

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: the most rows one transaction inserts
MAX_BATCH_SIZE = 100_000
#: idempotency keys this module makes start with this
KEY_PREFIX = "spark:"


@dataclass(frozen=True)
class Constant:
    """The same value for every row. A plain `str` option names a column; wrap a
    string meant as the value itself: `ordering_key=Constant("backfill")`."""

    value: Any


@dataclass(frozen=True)
class _Option:
    """One option of `publish_dataframe`: a column's value per row, or a constant."""

    name: str
    column: str | None = None
    constant: Any = None

    def of(self, row: Mapping[str, Any]) -> Any:
        return row[self.column] if self.column is not None else self.constant


def _option(name: str, value: Any, columns: list[str], kinds: tuple[type, ...]) -> _Option:
    if isinstance(value, str):
        if value not in columns:
            msg = (
                f"{name}={shown(value)} names a column the DataFrame does not have; its columns "
                f"are {', '.join(columns)} (wrap a value meant as a constant: Constant(...))"
            )
            raise InvalidOptionError(msg)
        return _Option(name, column=value)
    if isinstance(value, Constant):
        value = value.value
    elif value is not None and not isinstance(value, kinds):
        msg = (
            f"{name} must name a column (str) or be a constant of type "
            f"{' or '.join(k.__name__ for k in kinds)}, got {type(value).__name__}"
        )
        raise InvalidOptionError(msg)
    return _Option(name, constant=value)


@dataclass(frozen=True)
class _Plan:
    """What an executor needs to write its partitions (pickled to each task)."""

    url: str
    queue: str
    names: TableNames
    job_key: str
    batch_size: int
    body: _Option | None  # None: the whole row as JSON
    priority: _Option
    ordering_key: _Option
    idempotency_key: _Option | None  # None: derived from the row
    headers: _Option
    delay: _Option
    #: names this call in the correlation id of each of its messages
    run_id: str
    #: the database's time when the job began (naive UTC)
    started_at: dt.datetime

    @property
    def run_prefix(self) -> str:
        return f"spark:{self.run_id}:"


def publish_dataframe(
    df: DataFrame,
    url: str,
    queue: str,
    *,
    body: str | Constant | None = None,
    priority: str | int | Constant | None = None,
    ordering_key: str | Constant | None = None,
    idempotency_key: str | None = None,
    headers: str | Mapping[str, Any] | Constant | None = None,
    delay: str | float | dt.timedelta | Constant | None = None,
    batch_size: int = 1000,
    job_key: str = "",
    message_table: str = "message",
    archive_table: str = "message_archive",
) -> int:
    """Publish every row of `df` to `queue`; returns the number of new messages.

    Each option names a column (a `str`) or gives a constant. `body`: by default the
    whole row, as a JSON object of its columns. `idempotency_key`: a column of keys; by
    default each row's key is a hash of the queue, `job_key` and the row's content, so
    a retried task or a second run of the job publishes nothing twice while the first
    run's messages are still queued (see docs/spark.md for what happens after they are
    archived). Rows are written `batch_size` at a time, each batch one transaction.
    """
    queue = validate_queue_name(queue)
    url = executor_url(url)
    if not isinstance(job_key, str):
        msg = f"job_key must be a str, got {type(job_key).__name__}"
        raise InvalidOptionError(msg)
    columns = list(df.columns)
    text, number = (str,), (int, float, dt.timedelta)
    plan = _Plan(
        url=url,
        queue=queue,
        names=TableNames(message_table, archive_table),
        job_key=job_key,
        batch_size=require_whole("batch_size", batch_size, MAX_BATCH_SIZE),
        body=None if body is None else _option("body", body, columns, (object,)),
        priority=_option("priority", priority, columns, (int,)),
        ordering_key=_option("ordering_key", ordering_key, columns, text),
        idempotency_key=(
            None
            if idempotency_key is None
            else _option(
                "idempotency_key", _column_only("idempotency_key", idempotency_key), columns, text
            )
        ),
        headers=_option("headers", headers, columns, (Mapping,)),
        delay=_option("delay", delay, columns, number),
        run_id=uuid.uuid4().hex,
        started_at=dt.datetime.min,
    )
    plan = dataclasses.replace(plan, started_at=_database_time(plan))
    with executor_errors(f"publishing to queue {shown(queue)}"):
        return int(
            df.rdd.mapPartitionsWithIndex(
                lambda index, rows: _write_partition(plan, index, rows)
            ).sum()
        )


def _column_only(name: str, value: object) -> str:
    if not isinstance(value, str):
        msg = f"{name} must name a column: one key names one message, not every row"
        raise InvalidOptionError(msg)
    return value


def _broker(plan: _Plan, *, check_schema: bool) -> Any:
    from faststream_sqla.broker.broker import SqlaBroker

    return SqlaBroker(
        plan.url,
        message_table=plan.names.message,
        archive_table=plan.names.archive,
        validate_schema=check_schema,
        vacuum_message_table=False,
        logger=None,
        # one connection per task: a task publishes one batch at a time
        engine_options={"pool_size": 1, "max_overflow": 1},
    )


def _database_time(plan: _Plan) -> dt.datetime:
    """On the driver, before any task starts: the database's clock, once it is known
    to answer and to hold our tables (DatabaseUnreachableError or SchemaError
    otherwise, URL masked)."""

    async def check() -> dt.datetime:
        broker = _broker(plan, check_schema=True)
        try:
            await broker.connect()
            async with reading(broker.engine) as conn:
                now = await database_now(conn)
        except Exception:
            await after_failed_connect(plan.url)
            raise
        finally:
            await broker.stop()
        return now

    return run_async(check)


# -- on the executors ----------------------------------------------------------------


def _write_partition(plan: _Plan, index: int, rows: Iterable[Any]) -> Iterator[int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    # a retry of a failed task, or a speculative copy of a slow one
    again = context is not None and context.attemptNumber() > 0
    yield run_async(lambda: _write(plan, index, iter(rows), again=again))


async def _write(plan: _Plan, partition: int, rows: Iterator[Any], *, again: bool) -> int:
    broker = _broker(plan, check_schema=False)  # the driver checked it
    await broker.connect()
    try:
        new = 0
        number = 0
        while True:
            batch: list[tuple[int, Mapping[str, Any], Envelope]] = []
            for row in rows:
                values = row.asDict()  # nested rows (structs) are converted where used
                batch.append((number, values, _envelope(plan, values, partition, number)))
                number += 1
                if len(batch) == plan.batch_size:
                    break
            if not batch:
                return new
            new += await _publish(broker, plan, partition, batch, again=again)
    finally:
        await broker.stop()


async def _publish(
    broker: Any,
    plan: _Plan,
    partition: int,
    batch: list[tuple[int, Mapping[str, Any], Envelope]],
    *,
    again: bool,
) -> int:
    """Publish one batch in one transaction; the number of its messages that this call
    created (in this attempt of the task or an earlier one)."""
    envelopes = [envelope for _, _, envelope in batch]
    earlier = 0
    if again:
        # An earlier attempt of this task may have published some of these rows, and
        # consumers may have archived them since, which freed their keys: leave out the
        # keys archived since the call began, counting those the call created.
        keys = [k for k in dict.fromkeys(e.options.idempotency_key for e in envelopes) if k]
        async with reading(broker.engine) as conn:
            archived = await archived_keys(
                conn, ArchivedKeysQuery(broker.tables, plan.queue, plan.started_at, keys)
            )
        earlier = sum(bool(c and c.startswith(plan.run_prefix)) for c in archived.values())
        envelopes = [e for e in envelopes if e.options.idempotency_key not in archived]
    if not envelopes:
        return earlier
    try:
        ids = await broker.publish_batch(*envelopes, queue=plan.queue)
    except (InvalidOptionError, MessageSerializationError) as e:
        # raised before anything was written: find the row to name it
        producer = broker.config.producer
        for number, values, envelope in batch:
            try:
                await producer.build_rows(_command(plan.queue, envelope), (envelope,))
            except SqlaBrokerError as row_error:
                msg = f"{_where(partition, number, values)}: {row_error}"
                raise type(e)(msg) from row_error
        raise
    return earlier + len(await _created_by_this_call(broker, plan, set(ids)))


async def _created_by_this_call(broker: Any, plan: _Plan, ids: set[int]) -> set[int]:
    """Which of the messages `ids` (a batch's, new or held) this call created: those
    whose correlation id is the call's. A held key returns the id of a message an
    earlier run published, which is not new."""
    async with reading(broker.engine) as conn:
        return await ids_correlated(conn, broker.tables, ids, plan.run_prefix)


def _command(queue: str, envelope: Envelope) -> Any:
    from faststream.response.publish_type import PublishType

    from faststream_sqla.response import SqlaPublishCommand

    return SqlaPublishCommand(envelope, queue=queue, _publish_type=PublishType.PUBLISH)


def _where(partition: int, number: int, values: Mapping[str, Any]) -> str:
    shown = repr(dict(values))
    if len(shown) > 200:
        shown = shown[:200] + "...}"
    return f"row {number} of partition {partition} {shown}"


def _envelope(plan: _Plan, row: Mapping[str, Any], partition: int, number: int) -> Envelope:
    if plan.body is None:
        body: Any = {
            name: _json_value(value, name, partition, number, row) for name, value in row.items()
        }
    else:
        body = plan.body.of(row)
        if not isinstance(body, (str, bytes, bytearray)):
            body = _json_value(body, plan.body.column or "body", partition, number, row)
        elif isinstance(body, bytearray):
            body = bytes(body)
    if plan.idempotency_key is None:
        key = row_key(plan.queue, plan.job_key, row)
    else:
        key = plan.idempotency_key.of(row)
    options: dict[str, Any] = {"idempotency_key": key}
    for option in (plan.priority, plan.ordering_key, plan.delay):
        if (value := option.of(row)) is not None:
            options[option.name] = value
    headers = plan.headers.of(row)
    if hasattr(headers, "asDict"):  # a struct column
        headers = headers.asDict(recursive=True)
    if headers is not None and not isinstance(headers, Mapping):
        msg = (
            f"{_where(partition, number, row)}: headers column {shown(plan.headers.column)} "
            f"must hold a map or struct, got {type(headers).__name__}"
        )
        raise InvalidOptionError(msg)
    return Envelope(
        body,
        headers=None if headers is None else dict(headers),
        correlation_id=f"{plan.run_prefix}{partition}:{number}",
        **options,
    )


def _json_value(
    value: Any, column: str, partition: int, number: int, row: Mapping[str, Any]
) -> Any:
    """A Spark value as JSON carries it: times and dates as ISO 8601, decimals as
    strings (exact); bytes and NaN cannot be carried and fail naming the column."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
    elif isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    elif isinstance(value, decimal.Decimal):
        if value.is_finite():
            return str(value)
    elif isinstance(value, dt.timedelta):
        return value.total_seconds()
    elif hasattr(value, "asDict"):  # a struct: a Row
        return _json_value(value.asDict(), column, partition, number, row)
    elif isinstance(value, Mapping):
        return {str(k): _json_value(v, column, partition, number, row) for k, v in value.items()}
    elif isinstance(value, (list, tuple)):
        return [_json_value(v, column, partition, number, row) for v in value]
    msg = (
        f"column {column!r} of {_where(partition, number, row)} holds "
        f"{type(value).__name__} {value!r:.40}, which a JSON body cannot carry: convert it "
        "(e.g. base64 for binary) or publish it alone with body=<column>"
    )
    raise MessageSerializationError(msg)


def row_key(queue: str, job_key: str, row: Mapping[str, Any]) -> str:
    """The idempotency key of a row: the same for the same queue, job key and row
    content (column names and values), in any partition of any run."""
    content = json.dumps(
        [queue, job_key, row],
        sort_keys=True,
        separators=(",", ":"),
        default=_canonical,
        allow_nan=True,
    )
    return KEY_PREFIX + hashlib.sha256(content.encode()).hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return {"us": value // dt.timedelta(microseconds=1)}
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)
