"""The grants of docs/security.md, run as written: a producer role publishes and cannot
read, change or delete what is queued; a worker role drains the queue."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.retry import ConstantRetryStrategy

from tests.conftest import on_servers
from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until

SECURITY_PAGE = Path(__file__).resolve().parents[3] / "docs" / "security.md"
DOC_NAME = {"postgresql": "postgresql", "mysql": "mariadb"}
PASSWORD = "change-me"  # as the page writes it


def documented_grants(server: str, role: str) -> list[str]:
    """The statements of the page's ```sql block headed `-- <server>: <role>`."""
    page = SECURITY_PAGE.read_text()
    blocks = re.findall(r"```sql\n(.*?)```", page, flags=re.S)
    for block in blocks:
        if block.startswith(f"-- {DOC_NAME[server]}: {role}\n"):
            lines = [line for line in block.splitlines() if not line.lstrip().startswith("--")]
            return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
    raise AssertionError(f"docs/security.md has no {DOC_NAME[server]} {role} block")


class Roles:
    """The page's roles, renamed for this test's database, created and dropped by the
    server's administrator."""

    def __init__(self, server: str, admin_url: sa.URL) -> None:
        self.server, self.admin_url = server, admin_url
        self.database = admin_url.database or ""
        self.names = {role: f"queue_{role}_{self.database}" for role in ("producer", "worker")}

    def statements(self, role: str) -> list[str]:
        out = []
        for statement in documented_grants(self.server, role):
            for generic, name in self.names.items():
                statement = statement.replace(f"queue_{generic}", name)
            statement = statement.replace("DATABASE app", f"DATABASE {self.database}")
            out.append(statement.replace(" app.", f" {self.database}."))
        return out

    def url(self, role: str) -> sa.URL:
        return self.admin_url.set(username=self.names[role], password=PASSWORD)

    async def drop(self, admin: AsyncEngine) -> None:
        async with admin.begin() as conn:
            for name in self.names.values():
                if self.server == "mysql":
                    await conn.execute(sa.text(f"DROP USER IF EXISTS '{name}'@'%'"))
                    continue
                exists = await conn.scalar(
                    sa.text("SELECT 1 FROM pg_roles WHERE rolname = :name"), {"name": name}
                )
                if exists:
                    await conn.exec_driver_sql(f"DROP OWNED BY {name}")
                    await conn.exec_driver_sql(f"DROP ROLE {name}")

    async def create(self, admin: AsyncEngine) -> None:
        async with admin.begin() as conn:
            for role in self.names:
                for statement in self.statements(role):
                    # text(): the driver would read MariaDB's '%' host as a placeholder
                    await conn.execute(sa.text(statement))


@pytest.fixture(params=on_servers())
async def roles(request, server_databases) -> AsyncIterator[Roles]:
    server = request.param
    url = sa.make_url(server_databases[server])
    admin = create_async_engine(url)
    async with admin.begin() as conn:
        await conn.execute(sa.text("DELETE FROM message"))
        await conn.execute(sa.text("DELETE FROM message_archive"))
        await conn.execute(sa.text("DELETE FROM message_controls"))
        await conn.execute(sa.text("DELETE FROM message_breaker_events"))
    made = Roles(server, url)
    await made.drop(admin)  # left by an interrupted run
    await made.create(admin)
    try:
        yield made
    finally:
        await made.drop(admin)
        await admin.dispose()


async def test_a_producer_publishes_and_cannot_touch_the_queue_a_worker_drains_it(roles):
    admin = create_async_engine(roles.admin_url)
    producer_engine = create_async_engine(roles.url("producer"))
    try:
        async with SqlaBroker(roles.url("producer")) as producer:
            ids = [await producer.publish({"order": i}, queue="orders") for i in range(3)]
            ids += await producer.publish_batch({"order": 3}, {"order": 4}, queue="orders")
        assert len(set(ids)) == 5

        refused = (
            "SELECT payload FROM message",
            "SELECT headers FROM message",
            "UPDATE message SET state = 'FAILED'",
            "DELETE FROM message",
            "SELECT id FROM message_archive",
        )
        for statement in refused:
            with pytest.raises(sa.exc.DBAPIError) as denied:
                async with producer_engine.begin() as conn:
                    await conn.exec_driver_sql(statement)
            assert "denied" in str(denied.value).lower(), statement

        logger, lines = captured_logger(f"least-privilege-worker-{roles.database}")
        worker = SqlaBroker(roles.url("worker"), logger=logger)
        handled = Recorder()

        failed_once: set[int] = set()

        # With a circuit breaker that one failure opens: its statements run with the
        # worker's grants too (lock, insert and update the control row, the history).
        @worker.subscriber(
            "orders", circuit_breaker_threshold=1, circuit_breaker_cooldown=0.1,
            retry_strategy=ConstantRetryStrategy(delay_seconds=0.05, max_attempts=5), **FAST,
        )
        async def handle(body: dict) -> None:
            if body["order"] == 0 and not failed_once:
                failed_once.add(0)
                raise RuntimeError("flaky once")
            await worker.publish({"receipt": body["order"]}, queue="receipts")
            handled.record(body["order"])

        async with worker:
            await worker.start()
            await handled.wait_for(5)
            tables = worker.config.tables

            async def archived() -> bool:
                return len(await rows(admin, tables.archive)) == 5

            await wait_until(archived)
        done = await rows(admin, tables.archive)
        history = await rows(admin, tables.breaker_events)
        receipts = await rows(admin, tables.message, tables.message.c.queue == "receipts")
    finally:
        await producer_engine.dispose()
        await admin.dispose()
    assert sorted(handled.calls) == [0, 1, 2, 3, 4]
    assert {r["state"] for r in done} == {MessageState.COMPLETED}
    assert sorted(r["id"] for r in done) == sorted(ids)
    assert len(receipts) == 5
    assert [(r["from_state"], r["to_state"]) for r in history] == [
        ("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")
    ]
    # every loop of the worker ran with its grants: nothing failed and was retried (but
    # the handler's own failure, and the breaker it opened)
    failures = [
        message for r in lines.records if r.levelno >= logging.WARNING
        and "flaky once" not in (message := r.getMessage())
        and not message.startswith("circuit breaker of queue 'orders' is OPEN after 1 ")
    ]
    assert failures == []


async def test_a_worker_with_the_schedule_grants_fires_its_schedule(roles):
    admin = create_async_engine(roles.admin_url)
    try:
        async with admin.begin() as conn:
            for statement in roles.statements("worker with schedules"):
                await conn.execute(sa.text(statement))
            await conn.execute(sa.text("DELETE FROM message_schedule"))
        async with SqlaBroker(roles.url("worker")) as worker:
            worker.schedule("nightly", "run", every=1)
            await worker.start()
            tables = worker.config.tables

            async def fired() -> bool:
                return len(await rows(admin, tables.message)) >= 1

            await wait_until(fired)
        (row,) = await rows(admin, tables.message)
        assert (row["queue"], row["payload"]) == ("nightly", b"run")
    finally:
        async with admin.begin() as conn:
            await conn.execute(sa.text("DELETE FROM message_schedule"))
        await admin.dispose()


async def test_a_worker_drains_a_queue_with_channels_and_limits(roles):
    # The channel claim writes the control rows (the queue's version and rotation, the
    # rate windows, a rate-limited channel's own row): the page's worker grants cover it,
    # and a producer publishes to a channel with its plain grants.
    from faststream_sqla.admin import QueueAdmin

    admin = create_async_engine(roles.admin_url)
    try:
        async with QueueAdmin(admin) as operator:
            await operator.set_queue_limits("tenants", max_concurrency=4, channel_rate="100/s")
            await operator.set_channel_limits("tenants", "acme", max_concurrency=2)
        async with SqlaBroker(roles.url("producer")) as producer:
            for channel in ("acme", "globex"):
                await producer.publish_batch(*range(3), queue="tenants", channel=channel)
            await producer.publish("plain", queue="tenants")

        logger, lines = captured_logger(f"least-privilege-channels-{roles.database}")
        worker = SqlaBroker(roles.url("worker"), logger=logger)
        handled = Recorder()

        @worker.subscriber("tenants", max_workers=4, **FAST)
        async def handle(body: object, msg: SqlaMessage) -> None:
            handled.record(msg.channel)

        async with worker:
            await worker.start()
            await handled.wait_for(7)
        assert sorted(handled.calls, key=str) == sorted(
            ["acme"] * 3 + ["globex"] * 3 + [None], key=str
        )
        assert [r.getMessage() for r in lines.records if r.levelno >= logging.WARNING] == []
    finally:
        await admin.dispose()
