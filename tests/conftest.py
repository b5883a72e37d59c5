"""Shared fixtures: every database test runs on SQLite, PostgreSQL and MariaDB.

A database that cannot be reached fails the run; it is never skipped. Each xdist
worker gets databases of its own, so suites run in parallel without sharing rows.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla.dialects import Dialect, dialect_for
from faststream_sqla.migrations import upgrade_schema
from faststream_sqla.schema import QueueTables

PG_SERVER = os.environ.get("FSQLA_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432")
MYSQL_SERVER = os.environ.get("FSQLA_MYSQL_URL", "mysql+asyncmy://root@127.0.0.1:3306")
ALL_DIALECTS = ("sqlite", "postgresql", "mysql")
DIALECTS = tuple(
    d for d in os.environ.get("FSQLA_DIALECTS", ",".join(ALL_DIALECTS)).split(",") if d
)


def _database_name() -> str:
    # FSQLA_DB_PREFIX lets several people (or checkouts) share one server.
    prefix = os.environ.get("FSQLA_DB_PREFIX", "fsqla")
    return f"{prefix}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def server_database_url(dialect: str) -> str:
    """URL of this worker's own database on a server dialect."""
    name = _database_name()
    if dialect == "postgresql":
        return f"{PG_SERVER}/{name}"
    if dialect == "mysql":
        return f"{MYSQL_SERVER}/{name}"
    raise ValueError(dialect)


async def _create_database(dialect: str) -> None:
    name = _database_name()
    if dialect == "postgresql":
        admin = create_async_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            exists = await conn.scalar(
                sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            )
            if not exists:
                await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    else:
        admin = create_async_engine(f"{MYSQL_SERVER}/")
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    await admin.dispose()
    # a fresh schema per session: migrations may have changed since the last run
    engine = create_async_engine(server_database_url(dialect))
    async with engine.begin() as conn:
        for table in (
            "message_keys", "message", "message_archive", "message_schedule",
            "faststream_sqla_version", "handled",
        ):
            q = engine.dialect.identifier_preparer.quote(table)
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {q}")
    await upgrade_schema(engine)
    await engine.dispose()


@pytest.fixture(scope="session")
def server_databases() -> dict[str, str]:
    """Create (once per session and worker) the server databases with our schema."""
    urls = {}
    for dialect in DIALECTS:
        if dialect == "sqlite":
            continue
        try:
            asyncio.run(_create_database(dialect))
        except OSError as e:  # pragma: no cover - environment problem, must be loud
            pytest.fail(f"{dialect} server unreachable ({e}); start it, never skip", pytrace=False)
        urls[dialect] = server_database_url(dialect)
    return urls


@pytest.fixture(params=DIALECTS)
def dialect_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def database_url(
    dialect_name: str, server_databases: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A URL whose database holds our schema and no messages."""
    if dialect_name == "sqlite":
        path = tmp_path_factory.mktemp("sqlite") / "queue.db"
        url = f"sqlite+aiosqlite:///{path}"
        await upgrade_schema(url)
        yield url
        return
    url = server_databases[dialect_name]
    engine = create_async_engine(url)
    tables = QueueTables()
    async with engine.begin() as conn:
        for table in (
            *tables.for_dialect(engine.dialect.name).live, tables.archive, tables.schedule
        ):
            await conn.execute(table.delete())
    await engine.dispose()
    yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A separate engine for the test's own reads and writes (not the broker's)."""
    eng = create_async_engine(database_url)
    yield eng
    await eng.dispose()


@pytest.fixture
def tables() -> QueueTables:
    return QueueTables()


@pytest.fixture
async def dialect(engine: AsyncEngine, tables: QueueTables) -> Dialect:
    """The dialect of the test's database, prepared as the broker prepares it."""
    d = dialect_for(engine, tables)
    d.configure_engine(engine, owned=False)
    await d.prepare(engine)
    return d


#: a table of the user's own, written in the same transaction as an outbox publish
business = sa.Table("business_order", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))


@pytest.fixture
async def business_table(engine: AsyncEngine) -> AsyncIterator[sa.Table]:
    async with engine.begin() as conn:
        await conn.run_sync(business.metadata.drop_all)
        await conn.run_sync(business.metadata.create_all)
    yield business
    async with engine.begin() as conn:
        await conn.run_sync(business.metadata.drop_all)


# -- no silent gaps -------------------------------------------------------------------
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Every test here runs against a real database that CI provides: a skip means a
    # database (or a dependency) was missing, and that must fail the run, not hide.
    if _skipped and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped:
        terminalreporter.write_line(
            f"FAILED: {len(_skipped)} tests were skipped; skips are not allowed here:",
            red=True,
        )
        for nodeid in _skipped[:20]:
            terminalreporter.write_line(f"  {nodeid}")
