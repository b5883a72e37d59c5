"""The Spark pipeline on every database: a DataFrame published through publish_batch,
consumed by a running broker, read back from the archive and reported on.

One local Spark session serves the module: `local[2,4]` runs two tasks at a time and
lets a task fail up to four times, so an injected failure is retried as on a cluster.
The Spark calls block, so the async tests run them in a thread while the event loop
keeps any broker of the test running.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timedelta

import matplotlib.image
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from typer.testing import CliRunner

from faststream_sqla import (
    DatabaseUnreachableError,
    InvalidOptionError,
    MessageSerializationError,
    MessageState,
    SqlaBroker,
)
from faststream_sqla.cli import app
from faststream_sqla.retry import ConstantRetryStrategy
from faststream_sqla.schema import QueueTables
from faststream_sqla.spark import (
    Constant,
    delivery_report,
    publish_dataframe,
    read_archive,
    read_queue,
    spark_session,
)

from tests.support.helpers import FAST, rows, wait_until

ROWS = 10_000
FAILING_EVERY = 97  # rows whose n is a multiple of this fail every attempt


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2,4]", app_name="faststream-sqla-tests", shuffle_partitions=2)
    yield session
    session.stop()


async def in_thread(function, *args, **kwargs):
    return await asyncio.to_thread(function, *args, **kwargs)


async def count(engine, table, *where) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(sa.func.count()).select_from(table).where(*where))).scalar_one()


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between the two nearest ranks, as numpy's default."""
    ordered = sorted(values)
    h = (len(ordered) - 1) * p
    low = math.floor(h)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (h - low)


def expected_report(archived: list[sa.RowMapping]) -> dict[str, float]:
    latencies = [(r["archived_at"] - r["created_at"]) / timedelta(microseconds=1) / 1e6 for r in archived]
    states = [r["state"] for r in archived]
    attempts = [r["attempts_count"] for r in archived]
    span = max(r["archived_at"] for r in archived) - min(r["archived_at"] for r in archived)
    return {
        "messages": len(archived),
        "completed": states.count(MessageState.COMPLETED),
        "failed": states.count(MessageState.FAILED),
        "expired": states.count(MessageState.EXPIRED),
        "redriven": states.count(MessageState.REDRIVEN),
        "failure_rate": states.count(MessageState.FAILED) / len(archived),
        "mean_attempts": sum(attempts) / len(attempts),
        "max_attempts": max(attempts),
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p95_s": percentile(latencies, 0.95),
        "latency_p99_s": percentile(latencies, 0.99),
        # null when every message was archived at the same moment (one flush)
        "throughput_per_s": len(archived) / (span / timedelta(microseconds=1) / 1e6) if span else None,
    }


async def test_a_dataframe_is_enqueued_consumed_archived_and_reported(
    spark, database_url, engine, tables
):
    df = spark.range(ROWS, numPartitions=4).selectExpr(
        "id AS n", "concat('customer-', id % 13) AS customer"
    )
    assert await in_thread(publish_dataframe, df, database_url, "orders") == ROWS
    # the same job again: every row's key is held, nothing is written
    assert await in_thread(publish_dataframe, df, database_url, "orders") == 0
    queued = await rows(engine, tables.message)
    assert sorted(json.loads(r["payload"])["n"] for r in queued) == list(range(ROWS))
    assert json.loads(queued[0]["payload"]) == {
        "n": json.loads(queued[0]["payload"])["n"],
        "customer": f"customer-{json.loads(queued[0]['payload'])['n'] % 13}",
    }
    assert all(r["idempotency_key"].startswith("spark:") for r in queued)

    broker = SqlaBroker(database_url, logger=None)

    @broker.subscriber(
        "orders", max_workers=8,
        retry_strategy=ConstantRetryStrategy(delay_seconds=0, max_attempts=2), **FAST,
    )
    async def handle(order: dict) -> None:
        if order["n"] % FAILING_EVERY == 0:
            raise ValueError("this order cannot be handled")

    async with broker:
        await broker.start()
        await wait_until(lambda: _all_archived(engine, tables), timeout=120, interval=0.2)

    archive_df = await in_thread(read_archive, spark, database_url, queues=["orders"])
    assert archive_df.schema["created_at"].dataType.typeName() == "timestamp_ntz"
    archived = await rows(engine, tables.archive)
    read_back = await in_thread(lambda: archive_df.select("id", "state").collect())
    assert sorted((r.id, r.state) for r in read_back) == [(r["id"], r["state"].value) for r in archived]

    (report,) = await in_thread(lambda: delivery_report(archive_df).collect())
    expected = expected_report(archived)
    assert report.queue == "orders"
    assert expected["failed"] == len(range(0, ROWS, FAILING_EVERY))  # the handler ran as meant
    assert expected["throughput_per_s"] is not None
    for name, value in expected.items():
        assert getattr(report, name) == pytest.approx(value, abs=1e-6), name

    by_hour = await in_thread(lambda: delivery_report(archive_df, by="hour").collect())
    hours: dict[datetime, int] = defaultdict(int)
    for r in archived:
        hours[r["archived_at"].replace(minute=0, second=0, microsecond=0)] += 1
    assert {(r.period, r.messages) for r in by_hour} == set(hours.items())
    assert all(r.throughput_per_s == pytest.approx(r.messages / 3600) for r in by_hour)

    # The keys were freed when the messages were archived: the same rows published
    # again are new messages (docs/spark.md says so).
    again = await in_thread(publish_dataframe, df.where("n < 100"), database_url, "orders")
    assert again == 100
    live = await in_thread(lambda: read_queue(spark, database_url, states=["PENDING"]).collect())
    assert sorted(json.loads(bytes(r.payload))["n"] for r in live) == list(range(100))


async def _all_archived(engine, tables) -> bool:
    return await count(engine, tables.archive) == ROWS


#: rows of about 2 kB: Spark hands a task's rows on in buffers of 64 kB, so the writer
#: has received (and committed) most rows before the one where a failure is injected
PADDED = ("id AS n", "repeat('x', 2000) AS padding")


async def test_a_task_that_fails_midway_is_retried_and_each_row_is_enqueued_once(
    spark, database_url, engine, tables, tmp_path
):
    marker = tmp_path / "failed-once"
    url = database_url

    def fail_once(index, partition):
        for number, row in enumerate(partition):
            if index == 1 and number == 1500 and not marker.exists():
                # once the writer has committed some of the rows handed on to it
                marker.write_text(str(asyncio.run(_until_some_committed(url))))
                raise RuntimeError("injected task failure")
            yield row

    source = spark.range(4000, numPartitions=2).selectExpr(*PADDED)
    df = spark.createDataFrame(source.rdd.mapPartitionsWithIndex(fail_once), source.schema)
    new = await in_thread(publish_dataframe, df, database_url, "backfill", batch_size=250)
    assert int(marker.read_text()) > 0  # it failed midway, and Spark retried the task
    assert new == 4000  # the retry counts what its failed attempt committed as new
    queued = await rows(engine, tables.message)
    assert sorted(json.loads(r["payload"])["n"] for r in queued) == list(range(4000))


async def _until_some_committed(url: str) -> int:
    engine = create_async_engine(url)
    message = QueueTables().message
    try:
        await wait_until(lambda: _holds_any(engine, message))
        return await count(engine, message)
    finally:
        await engine.dispose()


async def _holds_any(engine, table) -> bool:
    return await count(engine, table) > 0


async def test_a_retry_skips_rows_whose_messages_were_consumed_since_the_failure(
    spark, database_url, engine, tables, tmp_path
):
    # A consumer runs during the job. The only task fails once the consumer has
    # archived every message it had published (which frees their keys); its retry must
    # not publish those rows again.
    marker = tmp_path / "failed-once"
    url = database_url

    def fail_once_after_the_archive(index, partition):
        for number, row in enumerate(partition):
            if number == 1500 and not marker.exists():
                asyncio.run(_until_all_archived(url))
                marker.touch()
                raise RuntimeError("injected task failure")
            yield row

    source = spark.range(2000, numPartitions=1).selectExpr(*PADDED)
    df = spark.createDataFrame(
        source.rdd.mapPartitionsWithIndex(fail_once_after_the_archive), source.schema
    )
    broker = SqlaBroker(database_url, logger=None)

    @broker.subscriber("live-backfill", max_workers=4, **FAST)
    async def handle(row: dict) -> None:
        pass

    async with broker:
        await broker.start()
        new = await in_thread(publish_dataframe, df, database_url, "live-backfill", batch_size=250)
        await wait_until(lambda: _archived_at_least(engine, tables, 2000))
    assert marker.exists()
    assert new == 2000
    archived = await rows(engine, tables.archive)
    assert sorted(json.loads(r["payload"])["n"] for r in archived) == list(range(2000))
    assert await count(engine, tables.message) == 0


async def _until_all_archived(url: str) -> None:
    engine = create_async_engine(url)
    tables = QueueTables()

    async def all_archived() -> bool:
        return (
            await count(engine, tables.message) == 0
            and await _archived_at_least(engine, tables, 250)
        )

    try:
        await wait_until(all_archived)
    finally:
        await engine.dispose()


async def test_options_come_from_columns_or_constants(spark, database_url, engine, tables):
    df = spark.createDataFrame(
        [(1, "a", 3, "k1", {"source": "crm"}, "one"), (2, "b", 7, "k2", {"source": "erp"}, "two")],
        "n INT, customer STRING, urgency INT, key STRING, meta MAP<STRING,STRING>, text STRING",
    )
    new = await in_thread(
        publish_dataframe, df, database_url, "mail",
        body="text", priority="urgency", ordering_key="customer", idempotency_key="key",
        headers="meta", delay=Constant(3600),
    )
    assert new == 2
    queued = await rows(engine, tables.message)
    assert sorted(
        (r["payload"], r["priority"], r["ordering_key"], r["idempotency_key"], r["headers"]["source"])
        for r in queued
    ) == [(b"one", 3, "a", "k1", "crm"), (b"two", 7, "b", "k2", "erp")]
    assert all(r["next_attempt_at"] - r["created_at"] >= timedelta(seconds=3599) for r in queued)


async def test_nested_and_typed_values_become_json(spark, database_url, engine, tables):
    df = spark.sql(
        "SELECT 1 AS n, named_struct('city', 'Oslo', 'zip', '0150') AS address,"
        " array(1, 2) AS tags, map('a', 1) AS counts, CAST('12.30' AS DECIMAL(5, 2)) AS price,"
        " DATE'2024-02-29' AS day, TIMESTAMP_NTZ'2024-02-29 12:00:00.5' AS at,"
        " named_struct('source', 'crm') AS meta"
    )
    assert await in_thread(publish_dataframe, df, database_url, "typed", headers="meta") == 1
    (row,) = await rows(engine, tables.message)
    assert json.loads(row["payload"]) == {
        "n": 1, "address": {"city": "Oslo", "zip": "0150"}, "tags": [1, 2], "counts": {"a": 1},
        "price": "12.30", "day": "2024-02-29", "at": "2024-02-29T12:00:00.500000",
        "meta": {"source": "crm"},
    }
    assert row["headers"]["source"] == "crm"


async def test_the_backfill_example_runs(spark, database_url, engine, tables):
    from examples.spark_backfill import backfill

    report = await in_thread(backfill, spark, database_url)
    assert await count(engine, tables.message) == report["published"] > 0


# -- bad input: a clear error, nothing written --------------------------------------


async def test_an_option_naming_a_missing_column_fails_before_any_write(
    spark, database_url, engine, tables
):
    df = spark.range(10).selectExpr("id AS n")
    with pytest.raises(InvalidOptionError, match=r"ordering_key='customer'.*columns are n"):
        await in_thread(publish_dataframe, df, database_url, "q", ordering_key="customer")
    with pytest.raises(InvalidOptionError, match="batch_size"):
        await in_thread(publish_dataframe, df, database_url, "q", batch_size=0)
    assert await count(engine, tables.message) == 0


async def test_a_body_that_cannot_be_serialised_names_the_column_and_row(
    spark, database_url, engine, tables
):
    df = spark.range(300, numPartitions=1).selectExpr(
        "id AS n", "IF(id = 250, unhex('00ff'), NULL) AS blob"
    )
    with pytest.raises(MessageSerializationError, match=r"column 'blob' of row 250 of partition 0"):
        await in_thread(publish_dataframe, df, database_url, "q")
    bad_priority = spark.range(300, numPartitions=1).selectExpr(
        "id AS n", "CAST(IF(id = 42, 99, 1) AS INT) AS urgency"
    )
    with pytest.raises(InvalidOptionError, match=r"row 42 of partition 0 .*priority"):
        await in_thread(publish_dataframe, bad_priority, database_url, "q", priority="urgency")
    assert await count(engine, tables.message) == 0  # the failing batch was never written


async def test_an_unreachable_database_is_named_with_its_password_masked(spark, dialect_name, tmp_path):
    url = {
        "sqlite": f"sqlite+aiosqlite:///{tmp_path}/missing/dir/queue.db",
        "postgresql": "postgresql+asyncpg://postgres:s3cret@127.0.0.1:1/nowhere",
        "mysql": "mysql+asyncmy://root:s3cret@127.0.0.1:1/nowhere",
    }[dialect_name]
    df = spark.range(10).selectExpr("id AS n")
    with pytest.raises(DatabaseUnreachableError) as raised:
        await in_thread(publish_dataframe, df, url, "q")
    assert "s3cret" not in str(raised.value)
    assert "127.0.0.1:1" in str(raised.value) or "queue.db" in str(raised.value)
    with pytest.raises(DatabaseUnreachableError) as raised:
        await in_thread(read_archive, spark, url)
    assert "s3cret" not in str(raised.value)


async def test_bad_read_and_report_options_are_refused(spark, database_url):
    with pytest.raises(InvalidOptionError, match="state 'COMPLETED' is not held by the queue"):
        await in_thread(read_queue, spark, database_url, states=["COMPLETED"])
    with pytest.raises(InvalidOptionError, match="aware datetime"):
        await in_thread(read_archive, spark, database_url, since=datetime(2024, 1, 1))
    with pytest.raises(InvalidOptionError, match="num_partitions"):
        await in_thread(read_archive, spark, database_url, num_partitions=0)
    empty = await in_thread(read_archive, spark, database_url)
    with pytest.raises(InvalidOptionError, match="by must be one of"):
        delivery_report(empty, by="week")
    assert await in_thread(lambda: delivery_report(empty).collect()) == []


# -- faststream-sqla report ---------------------------------------------------------


async def cli(url: str, *args: str, code: int = 0):
    # in-process, in a thread: the command finds the module's Spark session active,
    # uses it and leaves it running
    result = await asyncio.to_thread(CliRunner().invoke, app, ["report", "--url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


async def test_the_report_command_prints_and_plots_the_archive(
    spark, database_url, engine, tables, tmp_path
):
    broker = SqlaBroker(database_url, logger=None)

    @broker.subscriber("emails", **FAST)
    async def send(body: str) -> None:
        pass

    @broker.subscriber("invoices", retry_strategy=ConstantRetryStrategy(delay_seconds=0, max_attempts=1), **FAST)
    async def bill(body: str) -> None:
        if body.endswith("3"):
            raise ValueError("no such customer")

    async with broker:
        await broker.start()
        await broker.publish_batch(*(f"e{i}" for i in range(30)), queue="emails")
        await broker.publish_batch(*(f"i{i}" for i in range(20)), queue="invoices")
        await wait_until(lambda: _archived_at_least(engine, tables, 50))

    archived = await rows(engine, tables.archive)
    result = await cli(database_url, "--format", "json", "--since", "1h")
    report = {r["queue"]: r for r in json.loads(result.stdout)}
    for queue in ("emails", "invoices"):
        mine = [r for r in archived if r["queue"] == queue]
        expected = expected_report(mine)
        for name in ("messages", "completed", "failed", "max_attempts"):
            assert report[queue][name] == expected[name], (queue, name)
        assert report[queue]["latency_p95_s"] == pytest.approx(expected["latency_p95_s"], abs=1e-6)
    assert report["invoices"]["failed"] == 2  # i3 and i13

    result = await cli(database_url, "--format", "csv", "--queue", "invoices", "--by", "hour")
    (line,) = list(csv.DictReader(io.StringIO(result.stdout)))
    assert (line["queue"], line["messages"], line["failed"]) == ("invoices", "20", "2")

    plot = tmp_path / "report.png"
    result = await cli(database_url, "--plot", str(plot))
    assert "emails" in result.stdout and "invoices" in result.stdout
    assert "latency" in result.stdout
    image = matplotlib.image.imread(plot)
    assert image.shape[0] > 100 and image.shape[1] > 100


async def _archived_at_least(engine, tables, n: int) -> bool:
    return await count(engine, tables.archive) >= n


async def test_the_report_command_fails_in_one_line(spark, database_url, dialect_name, tmp_path):
    await cli(database_url, "--since", "yesterday", code=2)
    await cli(database_url, "--plot", str(tmp_path / "report.svg"), code=2)
    empty = await cli(database_url)
    assert "No archived messages match" in empty.output
    unreachable = {
        "sqlite": f"sqlite+aiosqlite:///{tmp_path}/missing/queue.db",
        "postgresql": "postgresql+asyncpg://postgres:s3cret@127.0.0.1:1/nowhere",
        "mysql": "mysql+asyncmy://root:s3cret@127.0.0.1:1/nowhere",
    }[dialect_name]
    result = await cli(unreachable, code=1)
    assert result.output.startswith("Error:") and len(result.output.strip().splitlines()) == 1
    assert "s3cret" not in result.output


def test_the_cli_works_without_pyspark(tmp_path):
    # pyspark made unimportable: the base CLI still runs, and report names the extra
    script = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from faststream_sqla.cli import main\n"
        "assert 'matplotlib' not in sys.modules\n"
        "main()\n"
    )
    url = f"sqlite+aiosqlite:///{tmp_path}/queue.db"
    base = subprocess.run(
        [sys.executable, "-c", script, "db", "upgrade", "--url", url],
        capture_output=True, text=True, timeout=60,
    )
    assert base.returncode == 0, base.stderr
    report = subprocess.run(
        [sys.executable, "-c", script, "report", "--url", url],
        capture_output=True, text=True, timeout=60,
    )
    assert report.returncode == 1
    assert "pip install 'faststream-sqla[spark]'" in report.stderr
    assert "Traceback" not in report.stderr


@pytest.mark.parametrize("dialect_name", ["postgresql"], indirect=True)
async def test_a_multi_host_url_publishes_and_reads_through_spark(database_url):
    # the first host has no server: each executor's connection moves on to the second
    # (the one a failover would leave writable), as the broker's do
    from chaos.servers import free_port

    # the module's session, or a new one if the report command's tests stopped it
    spark = spark_session("local[2,4]", app_name="faststream-sqla-tests", shuffle_partitions=2)

    real = sa.make_url(database_url)
    hosts = f"host=127.0.0.1:{free_port()}&host={real.host}:{real.port or 5432}"
    multi = f"postgresql+asyncpg://{real.username}@/{real.database}?{hosts}"
    multi += "&target_session_attrs=read-write"
    df = spark.range(0, 50).withColumnRenamed("id", "n")

    assert await in_thread(publish_dataframe, df, multi, "multi") == 50
    read = await in_thread(read_queue, spark, multi, queues=["multi"])
    assert await in_thread(read.count) == 50
