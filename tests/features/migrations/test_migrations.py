"""Alembic migrations, the schema check and the `faststream-sqla db` CLI on every database.

Server databases are shared with the other tests of the worker: every test that takes
the schema down leaves it upgraded again, whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typer.testing import CliRunner

from faststream_sqla.cli import app
from faststream_sqla.exceptions import SchemaMissingError, SchemaOutdatedError
from faststream_sqla.migrations import (
    HEAD_REVISION,
    check_schema,
    current_revision,
    downgrade_schema,
    script_location,
    upgrade_schema,
    version_table_for,
)
from faststream_sqla.schema import VERSION_TABLE, QueueTables, TableNames

from tests.support.helpers import run_script

CUSTOM = TableNames("fsqla_custom_msg", "fsqla_custom_archive")
SCRIPT = Path(sys.executable).parent / "faststream-sqla"


async def _table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))


async def _set_version(engine: AsyncEngine, revision: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = :r"), {"r": revision})


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """An empty SQLite database of its own."""
    eng = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    yield eng
    await eng.dispose()


@pytest.fixture
async def custom_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """The test database; the CUSTOM tables and their version table are dropped after."""
    yield engine
    async with engine.begin() as conn:
        # every table of the schema under the CUSTOM names (the keys table: MySQL's)
        custom = [t.name for t in reversed(QueueTables(CUSTOM, "mysql").metadata.sorted_tables)]
        for name in (*custom, version_table_for(CUSTOM)):
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))


def test_script_location_holds_the_scripts() -> None:
    location = Path(script_location())
    assert (location / "env.py").is_file()
    assert (location / "versions" / "0001_initial.py").is_file()
    assert HEAD_REVISION == "0017"


async def test_upgrade_creates_tables_at_head(engine: AsyncEngine) -> None:
    assert {
        "message", "message_archive", "message_schedule", "message_controls",
        "message_breaker_events", "message_workers", VERSION_TABLE,
        "message_breaker_events", "message_bindings", VERSION_TABLE,
    } <= await _table_names(engine)
    assert await current_revision(engine) == HEAD_REVISION
    await check_schema(engine, QueueTables())
    await upgrade_schema(engine)  # idempotent
    assert await current_revision(engine) == HEAD_REVISION


async def test_migration_matches_schema_py(engine: AsyncEngine, dialect_name: str) -> None:
    tables = QueueTables(dialect=dialect_name)

    def diff(conn: sa.Connection) -> list:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        changes = compare_metadata(ctx, tables.metadata)
        # Column-level changes come as lists of tuples, table/index ones as tuples.
        flat = [c for change in changes for c in (change if isinstance(change, list) else [change])]
        return [c for c in flat if not (c[0] == "remove_table" and c[1].name == VERSION_TABLE)]

    async with engine.connect() as conn:
        changes = await conn.run_sync(diff)
    if dialect_name == "mysql":
        # MariaDB stores JSON as LONGTEXT (with a CHECK): the type cannot round-trip.
        changes = [c for c in changes if not (c[0] == "modify_type" and c[3] == "headers")]
    assert changes == []

    indexes = {}
    async with engine.connect() as conn:
        for table in (*tables.live, tables.archive):
            found = await conn.run_sync(lambda c, t=table: sa.inspect(c).get_indexes(t.name))
            indexes.update({(table.name, i["name"]): i["column_names"] for i in found})
    key_indexes = {
        "ix_message_ordering": ["queue", "ordering_key", "id"],
        "ux_message_idempotency": ["queue", "idempotency_key"],
    }
    message_indexes = (
        # no partial indexes: one index on the generated ready_at serves both, and the
        # key indexes are on the keys table, which holds only keyed messages
        {("message", "ix_message_ready"): ["queue", "priority", "ready_at", "id"]}
        | {("message_keys", name): columns for name, columns in key_indexes.items()}
        | {("message_keys", "ix_message_channel"): ["queue", "channel", "id"]}
        if dialect_name == "mysql"
        else {
            ("message", "ix_message_claim"): ["queue", "priority", "next_attempt_at", "id"],
            ("message", "ix_message_stuck"): ["queue", "acquired_at"],
            ("message", "ix_message_channel"): ["queue", "channel", "next_attempt_at", "id"],
        }
        | {("message", name): columns for name, columns in key_indexes.items()}
    )
    assert indexes == {
        **message_indexes,
        ("message_archive", "ix_message_archive_queue_state"): ["queue", "state", "archived_at"],
    }


async def test_claim_index_is_partial_where_supported(
    engine: AsyncEngine, dialect_name: str
) -> None:
    sql = {
        "postgresql": "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_message_claim'",
        "sqlite": "SELECT sql FROM sqlite_master WHERE name = 'ix_message_claim'",
        # no partial indexes: the generated ready_at column is NULL for in-flight rows
        "mysql": "SELECT generation_expression FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name = 'message' "
        "AND column_name = 'ready_at'",
    }[dialect_name]
    async with engine.connect() as conn:
        definition = await conn.scalar(sa.text(sql))
    if dialect_name == "mysql":
        assert "'PENDING'" in definition and "'RETRYABLE'" in definition
        assert "next_attempt_at" in definition
        assert "channel" in definition  # a channel's messages are not the plain claim's
    else:
        # PostgreSQL prints its own normal form of the predicate
        assert "WHERE" in definition and "'PENDING'" in definition and "'RETRYABLE'" in definition
        assert "channel IS NULL" in definition


async def test_downgrade_to_base_then_upgrade(engine: AsyncEngine) -> None:
    try:
        await downgrade_schema(engine)
        assert not {"message", "message_archive"} & await _table_names(engine)
        assert await current_revision(engine) is None
        with pytest.raises(SchemaMissingError):
            await check_schema(engine, QueueTables())
    finally:
        await upgrade_schema(engine)
    assert await current_revision(engine) == HEAD_REVISION
    await check_schema(engine, QueueTables())


async def test_url_gets_own_engine(database_url: str) -> None:
    await upgrade_schema(database_url)
    assert await current_revision(database_url) == HEAD_REVISION


async def test_custom_table_names(custom_engine: AsyncEngine) -> None:
    engine = custom_engine
    kw = {"message_table": CUSTOM.message, "archive_table": CUSTOM.archive}
    await upgrade_schema(engine, **kw)
    custom_tables = {t.name for t in QueueTables(CUSTOM).metadata.sorted_tables}
    assert custom_tables <= await _table_names(engine)
    assert await current_revision(engine, **kw) == HEAD_REVISION
    await check_schema(engine, QueueTables(CUSTOM))
    # the default tables next to them are untouched
    assert await current_revision(engine) == HEAD_REVISION

    await downgrade_schema(engine, **kw)
    assert not custom_tables & await _table_names(engine)
    assert {"message", "message_archive"} <= await _table_names(engine)
    with pytest.raises(SchemaMissingError, match="--message-table fsqla_custom_msg"):
        await check_schema(engine, QueueTables(CUSTOM))


async def test_upgrade_from_the_shell_writes_nothing_on_stderr(
    custom_engine: AsyncEngine, database_url: str
) -> None:
    # New tables with a version table of their own, created as a deploy creates them.
    tables = ["--message-table", CUSTOM.message, "--archive-table", CUSTOM.archive]
    for _ in range(2):  # the second run finds everything there
        done = await run_script(database_url, "db", "upgrade", *tables)
        assert (done.returncode, done.stderr) == (0, "")
    assert await current_revision(
        custom_engine, message_table=CUSTOM.message, archive_table=CUSTOM.archive
    ) == HEAD_REVISION


async def test_check_schema_missing_on_empty_database(sqlite_engine: AsyncEngine) -> None:
    with pytest.raises(SchemaMissingError) as info:
        await check_schema(sqlite_engine, QueueTables())
    message = str(info.value)
    assert "message, message_archive" in message
    assert f"faststream-sqla db upgrade --url {sqlite_engine.url}" in message


async def test_check_schema_outdated_revision(engine: AsyncEngine) -> None:
    # a database one revision behind this release
    await downgrade_schema(engine, revision="0001")
    try:
        with pytest.raises(SchemaOutdatedError) as info:
            await check_schema(engine, QueueTables())
    finally:
        await upgrade_schema(engine)
    assert "at revision '0001'" in str(info.value) and f"{HEAD_REVISION!r}" in str(info.value)
    assert f"faststream-sqla db upgrade --url {engine.url!r}".replace("'", "") in str(info.value)


async def test_check_schema_unknown_revision(engine: AsyncEngine) -> None:
    try:
        await _set_version(engine, "ffff")  # as if written by a newer faststream-sqla
        with pytest.raises(
            SchemaOutdatedError, match="'ffff'.*upgrade the faststream-sqla package"
        ):
            await check_schema(engine, QueueTables())
    finally:
        await _set_version(engine, HEAD_REVISION)
    await check_schema(engine, QueueTables())


async def test_unversioned_tables_accepted_unless_column_missing(
    sqlite_engine: AsyncEngine,
) -> None:
    # tables managed in the user's own migrations: no version table of ours
    async with sqlite_engine.begin() as conn:
        await conn.run_sync(QueueTables().metadata.create_all)
    await check_schema(sqlite_engine, QueueTables())

    async with sqlite_engine.begin() as conn:
        await conn.execute(sa.text("ALTER TABLE message_archive DROP COLUMN correlation_id"))
    with pytest.raises(SchemaOutdatedError, match="message_archive lacks correlation_id"):
        await check_schema(sqlite_engine, QueueTables())


def test_password_is_masked() -> None:
    from faststream_sqla.migrations import upgrade_command

    engine = create_async_engine("postgresql+asyncpg://me:s3cret@db.example/app")
    command = upgrade_command(engine, TableNames())
    assert "s3cret" not in command
    assert (
        command == "faststream-sqla db upgrade --url 'postgresql+asyncpg://me:***@db.example/app'"
    )


# --- CLI ------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_upgrade_and_current(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    result = runner.invoke(app, ["db", "upgrade", "--url", url])
    assert result.exit_code == 0, result.output
    assert HEAD_REVISION in result.output

    result = runner.invoke(app, ["db", "current"], env={"FASTSTREAM_SQLA_URL": url})
    assert result.exit_code == 0, result.output
    assert f"{HEAD_REVISION} (head)" in result.output


def test_cli_current_on_every_database(database_url: str) -> None:
    result = runner.invoke(app, ["db", "current", "--url", database_url])
    assert result.exit_code == 0, result.output
    assert f"{HEAD_REVISION} (head)" in result.output


def test_cli_downgrade_asks_first(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--url", url]).exit_code == 0

    result = runner.invoke(app, ["db", "downgrade", "--url", url], input="n\n")
    assert result.exit_code == 1
    assert f"{HEAD_REVISION} (head)" in runner.invoke(app, ["db", "current", "--url", url]).output

    result = runner.invoke(app, ["db", "downgrade", "--url", url, "--yes"])
    assert result.exit_code == 0, result.output
    assert "none" in runner.invoke(app, ["db", "current", "--url", url]).output


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "not a database URL"),
        ("nosuchdialect+driver://host/db", "invalid database URL"),
        ("postgresql+asyncpg://me:s3cret@127.0.0.1:1/db", "me:***@127.0.0.1:1"),
        ("sqlite+aiosqlite:////nonexistent/dir/x.db", "unable to open database file"),
    ],
)
def test_cli_errors_exit_1(url: str, expected: str) -> None:
    result = runner.invoke(app, ["db", "upgrade", "--url", url])
    assert result.exit_code == 1
    assert expected in result.output
    assert "s3cret" not in result.output
    assert "Traceback" not in result.output


def test_cli_rejects_bad_table_name(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    result = runner.invoke(app, ["db", "upgrade", "--url", url, "--message-table", "x;drop"])
    assert result.exit_code == 2
    assert "must be 1-48 letters" in result.output


def test_console_script(tmp_path: Path) -> None:
    script = SCRIPT if SCRIPT.exists() else shutil.which("faststream-sqla")
    assert script, "install the project: pip install -e . (provides faststream-sqla)"
    url = f"sqlite+aiosqlite:///{tmp_path / 'script.db'}"
    env = {**os.environ, "FASTSTREAM_SQLA_URL": url}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], check=False, capture_output=True, text=True, env=env, timeout=60
        )

    upgraded = run("db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    current = run("db", "current")
    assert current.returncode == 0, current.stderr
    assert f"{HEAD_REVISION} (head)" in current.stdout

    failed = run("db", "current", "--url", "postgresql+asyncpg://me:s3cret@127.0.0.1:1/db")
    assert failed.returncode == 1
    assert "Error:" in failed.stderr and "s3cret" not in failed.stderr


async def test_upgrade_from_the_first_revision_keeps_messages(engine: AsyncEngine) -> None:
    """A database created by 0001 moves to head with its rows intact."""
    from faststream_sqla.drivers import driver_for

    await downgrade_schema(engine, revision="0001")
    try:
        driver = driver_for(engine, QueueTables())
        # rows as 0001 stores them: only its columns
        async with engine.begin() as conn:
            for _ in range(2):
                await conn.execute(
                    sa.text(
                        "INSERT INTO message (queue, headers, payload, state, attempts_count, "
                        "deliveries_count, created_at, next_attempt_at) VALUES ('m', '{}', "
                        ":payload, 'PENDING', 0, 0, :now, :now)"
                    ),
                    {"payload": b"x", "now": datetime.now(timezone.utc).replace(tzinfo=None)
                     - timedelta(seconds=1)},
                )
            in_flight, kept = (
                await conn.execute(sa.text("SELECT id FROM message ORDER BY id"))
            ).scalars().all()
        async with engine.begin() as conn:  # claimed an hour ago, by a process now dead
            await conn.execute(
                sa.text(
                    "UPDATE message SET state = 'PROCESSING', deliveries_count = 1, "
                    "acquired_at = :at WHERE id = :id"
                ),
                {"at": datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(hours=1),
                 "id": in_flight},
            )
        await upgrade_schema(engine)
        assert await current_revision(engine) == HEAD_REVISION
        async with engine.connect() as conn:  # the token starts from the deliveries
            tokens = dict((await conn.execute(
                sa.text("SELECT id, claims_count FROM message"))).all())
        assert tokens == {in_flight: 1, kept: 0}
        claimed = await driver.claim(engine, "m", 10)
        assert [m.id for m in claimed] == [kept]
        # the row in flight at the upgrade is still found as stuck, then claimable
        assert await driver.release_stuck(engine, ["m"], 60.0) == 1
        assert [m.id for m in await driver.claim(engine, "m", 10)] == [in_flight]
    finally:
        await upgrade_schema(engine)
        async with engine.begin() as conn:
            await conn.execute(QueueTables().message.delete())
