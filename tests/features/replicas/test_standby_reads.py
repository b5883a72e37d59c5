"""The admin API, the CLI's read commands, the metrics collector and the dashboard read
from a PostgreSQL streaming standby when given its URL as `read_url`, report how far
behind it is, and send every change to the primary.

PostgreSQL only: the standby is PostgreSQL's (chaos/servers.py `ReplicatedPostgres`);
MariaDB's replica is test_mariadb_replica.py's."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from chaos.servers import ReplicatedPostgres, free_port
from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.connecting import create_engine
from faststream_sqla.dashboard import create_app
from faststream_sqla.migrations import upgrade_schema
from faststream_sqla.prometheus import QueueStateCollector
from tests.support.cli import cli
from tests.support.helpers import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.databases("postgresql"),
    pytest.mark.asyncio(loop_scope="module"),
]

#: the throwaway servers trust every connection: a password is carried, never checked
PASSWORD = "s3cr@t:pw"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair() -> AsyncIterator[ReplicatedPostgres]:
    """A primary with our schema and an asynchronous streaming standby of it."""
    async with ReplicatedPostgres(synchronous=False) as replicated:
        engine = create_engine(replicated.primary.url)
        await upgrade_schema(engine)
        await engine.dispose()
        yield replicated


async def publish(pair: ReplicatedPostgres, queue: str, count: int) -> None:
    """`count` messages published on the primary, then awaited on the standby."""
    broker = SqlaBroker(pair.primary.url, logger=None)
    async with broker:
        await broker.connect()
        await broker.publish_batch(*(f"m{i}" for i in range(count)), queue=queue)
    async with QueueAdmin(pair.standby.url) as standby:

        async def replayed() -> bool:
            return queue in await standby.queue_names()

        await wait_until(replayed)


async def test_an_admin_with_read_url_reads_the_standby_and_reports_its_lag(pair):
    await publish(pair, "standby-reads", 3)
    async with QueueAdmin(pair.primary.url, read_url=pair.standby.url) as admin:
        assert admin.reads_from_replica
        (stats,) = await admin.queues(["standby-reads"])
        assert stats.ready.value == 3
        lag = await admin.replica_lag()
        assert lag is not None and lag.seconds is not None and lag.seconds >= 0
        assert str(lag) == f"read from replica, {lag.seconds:.0f} s behind"
    async with QueueAdmin(pair.primary.url) as primary_only:
        assert await primary_only.replica_lag() is None  # reads go to the primary


async def test_a_change_through_an_admin_with_read_url_lands_on_the_primary(pair):
    await publish(pair, "standby-changes", 2)
    async with QueueAdmin(pair.primary.url, read_url=pair.standby.url) as admin:
        assert await admin.pause_queue("standby-changes") is True
        # the read a change makes goes to the primary too: the new limit at once
        limits = await admin.set_queue_limits("standby-changes", max_concurrency=7)
        assert limits.max_concurrency == 7
        assert await admin.purge("standby-changes") == 2
    async with QueueAdmin(pair.primary.url) as primary:
        assert "standby-changes" in await primary.paused_queues()
        (stats,) = await primary.queues(["standby-changes"], unknown_as_empty=True)
        assert stats.ready.value == 0


async def test_the_cli_reads_from_the_replica_and_says_how_far_behind_it_is(pair):
    await publish(pair, "standby-cli", 4)
    result = await cli(pair.primary.url, "queues", "--read-url", pair.standby.url)
    assert "read from replica, " in result.stdout and " s behind" in result.stdout
    assert "standby-cli" in result.stdout
    # --json: stdout stays JSON, the lag line goes to stderr
    result = await cli(pair.primary.url, "queues", "--json", "--read-url", pair.standby.url)
    (row,) = [q for q in json.loads(result.stdout) if q["queue"] == "standby-cli"]
    assert row["ready"]["value"] == 4
    assert "read from replica" in result.stderr


async def test_the_cli_takes_the_replica_from_its_environment_variable(pair, monkeypatch):
    await publish(pair, "standby-env", 1)
    monkeypatch.setenv("FASTSTREAM_SQLA_READ_URL", pair.standby.url)
    result = await cli(pair.primary.url, "dlq", "summary")
    assert result.stdout.startswith("read from replica, ")


async def test_a_change_command_takes_no_read_url(pair):
    result = await cli(
        pair.primary.url, "queue", "pause", "q", "--read-url", pair.standby.url, code=2
    )
    assert "--read-url" in result.output


async def test_the_collector_reports_the_replica_lag_beside_the_figures(pair):
    await publish(pair, "standby-metrics", 2)
    registry = CollectorRegistry()
    collector = QueueStateCollector(
        pair.primary.url, read_url=pair.standby.url, queues=["standby-metrics"],
        interval=3600, registry=registry,
    )
    async with collector:
        depth = registry.get_sample_value(
            "faststream_sqla_queue_depth", {"queue": "standby-metrics", "state": "ready"}
        )
        lag = registry.get_sample_value("faststream_sqla_replica_lag_seconds", {})
    assert depth == 2
    assert lag is not None and not math.isnan(lag) and lag >= 0

    # built beside a broker: reads through the broker's tables, from the replica
    broker = SqlaBroker(pair.primary.url, logger=None)
    registry = CollectorRegistry()
    collector = QueueStateCollector(
        broker, read_url=pair.standby.url, queues=["standby-metrics"], interval=3600,
        registry=registry,
    )
    async with broker, collector:
        assert collector.admin.reads_from_replica
        assert registry.get_sample_value("faststream_sqla_replica_lag_seconds", {}) >= 0
    # without read_url there is no replica to report
    registry = CollectorRegistry()
    async with QueueStateCollector(pair.primary.url, interval=3600, registry=registry):
        assert registry.get_sample_value("faststream_sqla_replica_lag_seconds", {}) is None


async def test_the_dashboard_reads_from_the_replica_with_a_lag_banner(pair):
    await publish(pair, "standby-dashboard", 1)
    app = create_app(pair.primary.url, read_url=pair.standby.url)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            info = (await http.get("/api/info")).json()
            listed = (await http.get("/api/queues")).json()
            page = (await http.get("/")).text
            paused = await http.post("/api/queues/standby-dashboard/pause")
    assert info["replica"]["text"].startswith("read from replica, ")
    assert info["replica"]["lag_seconds"] >= 0
    assert listed["replica"]["lag_seconds"] >= 0
    assert "standby-dashboard" in [q["queue"] for q in listed["queues"]]
    # every page carries the banner over the figures
    assert '<div class="banner replica" role="status">Figures read from replica, ' in page
    assert "standby-dashboard" in page
    assert paused.status_code == 200, paused.text
    async with QueueAdmin(pair.primary.url) as primary:
        assert "standby-dashboard" in await primary.paused_queues()


def with_password(url: str) -> str:
    return url.replace("postgres@", "postgres:s3cr%40t%3Apw@", 1)


def standby_first(pair: ReplicatedPostgres) -> str:
    """Both hosts, the standby preferred: a read_url that follows the standby."""
    hosts = "&".join(f"host=127.0.0.1:{s.port}" for s in (pair.standby, pair.primary))
    return f"postgresql+asyncpg://postgres:s3cr%40t%3Apw@/postgres?{hosts}&target_session_attrs=prefer-standby"


def assert_readable(text: str, pair: ReplicatedPostgres) -> None:
    for server in (pair.primary, pair.standby):
        assert f"host=127.0.0.1:{server.port}" in text, text
    assert "postgres:***@" in text, text
    for secret in (PASSWORD, "s3cr", "%3A"):
        assert secret not in text, text


async def test_the_admin_collector_and_dashboard_work_on_multi_host_urls(pair):
    """`pair.url` names both servers, read-write first: the admin changes the primary
    through it; a multi-host read_url preferring the standby reads from it."""
    await publish(pair, "multi-host", 2)
    url, read_url = with_password(pair.url), standby_first(pair)
    async with QueueAdmin(url, read_url=read_url) as admin:
        (stats,) = await admin.queues(["multi-host"])
        assert stats.ready.value == 2
        lag = await admin.replica_lag()
        assert lag is not None and lag.seconds is not None
        assert await admin.pause_queue("multi-host") is True
    async with QueueAdmin(pair.primary.url) as primary:
        assert "multi-host" in await primary.paused_queues()

    registry = CollectorRegistry()
    async with QueueStateCollector(url, queues=["multi-host"], interval=3600, registry=registry):
        ready = {"queue": "multi-host", "state": "ready"}
        assert registry.get_sample_value("faststream_sqla_queue_depth", ready) == 2

    app = create_app(url, read_url=read_url)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            info = (await http.get("/api/info")).json()
    assert_readable(info["database"], pair)
    assert "target_session_attrs=read-write" in info["database"]


async def test_the_cli_reads_on_multi_host_urls_and_names_an_unreachable_replica_readably(pair):
    result = await cli(
        with_password(pair.url), "queues", "--read-url", standby_first(pair)
    )
    assert result.stdout.startswith("read from replica, ")
    dead = standby_first(pair).replace(str(pair.standby.port), str(free_port())).replace(
        str(pair.primary.port), str(free_port())
    )
    result = await cli(pair.primary.url, "queues", "--read-url", dead, code=1)
    shown = result.output.replace("\n", "")
    assert shown.startswith("Error: replica postgresql+asyncpg://postgres:***@"), shown
    assert "target_session_attrs=prefer-standby" in shown
    for secret in (PASSWORD, "s3cr", "%3A"):
        assert secret not in shown


async def test_reads_go_on_from_the_standby_while_the_primary_is_down(pair):
    """Last in this module: it stops the primary."""
    await publish(pair, "standby-alone", 1)
    async with QueueAdmin(pair.primary.url, read_url=pair.standby.url) as admin:
        await pair.primary.stop("fast")
        (stats,) = await admin.queues(["standby-alone"])
        assert stats.ready.value == 1
        with pytest.raises(OSError):
            await admin.pause_queue("standby-alone")
