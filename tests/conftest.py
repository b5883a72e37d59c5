"""Shared fixtures: every database test runs on SQLite, PostgreSQL and MariaDB.

FSQLA_DIALECTS chooses the databases; tests of the others are deselected when they are
collected (never skipped: CI fails on skips). A test bound to one server says so with
`@pytest.mark.databases("postgresql")` (or takes a parameter from `on_servers()`). A
configured server that cannot be reached ends the session at once with one message.
Each xdist worker gets databases of its own, so suites run in parallel without sharing
rows.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.drivers import Driver, driver_for
from faststream_sqla.migrations import upgrade_schema
from faststream_sqla.schema import QueueTables
from faststream_sqla.urls import masked

PG_SERVER = os.environ.get("FSQLA_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432")
MYSQL_SERVER = os.environ.get("FSQLA_MYSQL_URL", "mysql+asyncmy://root@127.0.0.1:3306")
ALL_DIALECTS = ("sqlite", "postgresql", "mysql")
SERVERS = ("postgresql", "mysql")
DIALECTS = tuple(
    d.strip()
    for d in os.environ.get("FSQLA_DIALECTS", ",".join(ALL_DIALECTS)).split(",")
    if d.strip()
)
if unknown := set(DIALECTS) - set(ALL_DIALECTS):
    raise pytest.UsageError(
        f"FSQLA_DIALECTS names {', '.join(sorted(unknown))}; choose from {', '.join(ALL_DIALECTS)}"
    )
#: how each server is configured, for the message when it does not answer
SERVER_SETTINGS = {
    "postgresql": ("PostgreSQL", "FSQLA_PG_URL", PG_SERVER),
    "mysql": ("MariaDB/MySQL", "FSQLA_MYSQL_URL", MYSQL_SERVER),
}


def on_servers(*servers: str) -> list[object]:
    """Parameters for a test that runs once per server, each marked with its database so
    that FSQLA_DIALECTS deselects it: `@pytest.mark.parametrize("server", on_servers())`."""
    return [
        pytest.param(server, marks=pytest.mark.databases(server), id=server)
        for server in servers or SERVERS
    ]


def _database_name() -> str:
    # FSQLA_DB_PREFIX lets several people (or checkouts) share one server.
    prefix = os.environ.get("FSQLA_DB_PREFIX", "fsqla")
    return f"{prefix}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def server_database_url(driver: str) -> str:
    """URL of this worker's own database on a server driver."""
    name = _database_name()
    if driver == "postgresql":
        return f"{PG_SERVER}/{name}"
    if driver == "mysql":
        return f"{MYSQL_SERVER}/{name}"
    raise ValueError(driver)


async def _create_database(driver: str) -> None:
    name = _database_name()
    if driver == "postgresql":
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
    engine = create_async_engine(server_database_url(driver))
    async with engine.begin() as conn:
        # every table of the schema (the keys table is MySQL's shape only), by name
        ours = [t.name for t in QueueTables(dialect="mysql").metadata.sorted_tables]
        for table in (*ours, "faststream_sqla_version", "handled"):
            q = engine.dialect.identifier_preparer.quote(table)
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {q}")
    await upgrade_schema(engine)
    await engine.dispose()


class ServerDatabases(Mapping[str, str]):
    """This worker's database URL per server, each database created (with our schema)
    the first time a test asks for it."""

    def __init__(self) -> None:
        self._ready: dict[str, str] = {}

    def __getitem__(self, driver: str) -> str:
        if driver not in SERVERS:
            raise KeyError(driver)
        if driver not in DIALECTS:
            pytest.fail(
                f"this test uses {driver}, which FSQLA_DIALECTS={','.join(DIALECTS)} leaves "
                f"out: mark it @pytest.mark.databases({driver!r}) so that it is deselected",
                pytrace=False,
            )
        if driver not in self._ready:
            # on a thread of its own: async fixtures ask from inside their event loop
            with ThreadPoolExecutor(1) as thread:
                thread.submit(asyncio.run, _create_database(driver)).result()
            self._ready[driver] = server_database_url(driver)
        return self._ready[driver]

    def __iter__(self) -> Iterator[str]:
        return (d for d in SERVERS if d in DIALECTS)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@pytest.fixture(scope="session")
def server_databases() -> ServerDatabases:
    """This worker's server databases, created on first use once per session."""
    return ServerDatabases()


@pytest.fixture(params=DIALECTS)
def dialect_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def database_url(
    dialect_name: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A URL whose database holds our schema and no messages."""
    if dialect_name == "sqlite":
        path = tmp_path_factory.mktemp("sqlite") / "queue.db"
        url = f"sqlite+aiosqlite:///{path}"
        await upgrade_schema(url)
        yield url
        return
    # asked for here, not as a parameter: a SQLite test needs no server
    url = request.getfixturevalue("server_databases")[dialect_name]
    engine = create_async_engine(url)
    tables = QueueTables(dialect=engine.dialect.name)
    async with engine.begin() as conn:
        # every table of the schema, dependants first
        for table in reversed(tables.metadata.sorted_tables):
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
async def driver(engine: AsyncEngine, tables: QueueTables) -> Driver:
    """The driver of the test's database, prepared as the broker prepares it."""
    d = driver_for(engine, tables)
    d.configure_engine(engine, owned=False)
    await d.prepare(engine)
    return d


@pytest.fixture
async def make_broker(database_url: str) -> AsyncIterator[Callable[..., SqlaBroker]]:
    """`make_broker(**options)` builds `SqlaBroker(database_url, **options)` on the test's
    database (schema in place, no messages). The test declares its subscribers (see
    `tests.support.helpers.recording`), then connects or starts it, usually as
    `async with broker: await broker.start()`; a broker still running at teardown (a
    failed assertion inside that block) is closed."""
    made: list[SqlaBroker] = []

    def make(**options: Any) -> SqlaBroker:
        broker = SqlaBroker(database_url, **options)
        made.append(broker)
        return broker

    yield make
    for broker in reversed(made):
        await broker.stop()


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


# -- only the configured databases ----------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "databases(*names): the test needs these databases (deselected unless "
        "FSQLA_DIALECTS names them all)"
    )


def databases_of(item: pytest.Item) -> set[str]:
    """The databases a collected test runs on: its `databases` marks (on the test, its
    module or one of its parameters) and its `dialect_name` parameter."""
    needed = {name for mark in item.iter_markers("databases") for name in mark.args}
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "dialect_name" in callspec.params:
        needed.add(callspec.params["dialect_name"])
    return needed


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen, dropped = [], []
    for item in items:
        (chosen if databases_of(item) <= set(DIALECTS) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen
    if not hasattr(config, "workerinput"):  # xdist workers: their controller checked
        _require_reachable({name for item in chosen for name in databases_of(item)})


def pytest_sessionstart(session: pytest.Session) -> None:
    # An xdist controller collects nothing, so it cannot tell which servers the tests
    # need: it checks every configured one before its workers start.
    if getattr(session.config.option, "numprocesses", None) and not hasattr(
        session.config, "workerinput"
    ):
        _require_reachable(set(DIALECTS))


def _require_reachable(drivers: set[str]) -> None:
    """End the session with one message if a server among `drivers` does not answer."""
    for server in sorted(drivers & set(SERVERS)):
        if (problem := asyncio.run(_unreachable(server))) is not None:
            pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)


async def _unreachable(server: str) -> str | None:
    """None if the server answers; else what to do about it, in one message."""
    name, setting, url = SERVER_SETTINGS[server]
    admin_database = "postgres" if server == "postgresql" else ""
    engine = create_async_engine(f"{url}/{admin_database}")

    async def select_one() -> None:
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    try:
        await asyncio.wait_for(select_one(), 10)
    except Exception as e:  # noqa: BLE001 - any failure means: not usable for tests
        reason = e.orig if isinstance(e, sa.exc.DBAPIError) else e
        others = ",".join(d for d in DIALECTS if d != server) or "sqlite"
        return (
            f"{name} at {masked(url)} does not answer ({type(reason).__name__}: "
            f"{reason or 'timed out'}). Start it, point {setting} at a server that runs, "
            f"or leave {server} out of FSQLA_DIALECTS (e.g. FSQLA_DIALECTS={others})."
        )
    finally:
        await engine.dispose()
    return None


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
