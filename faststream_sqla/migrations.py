"""Create, upgrade and check our tables with the Alembic scripts shipped in the package.

Alembic is synchronous: every command runs inside `AsyncConnection.run_sync`, with the
connection handed to env.py through `config.attributes`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from alembic import command

from .connecting import create_engine, ensure_reachable
from .drivers.base import reading
from .exceptions import SchemaMissingError, SchemaOutdatedError
from .schema import VERSION_TABLE, QueueTables, TableNames
from .urls import masked

T = TypeVar("T")


def script_location() -> str:
    """The Alembic scripts: inside the wheel, or at the repository top in editable installs."""
    package = Path(__file__).resolve().parent
    installed = package / "_alembic"
    return str(installed if installed.is_dir() else package.parent / "alembic")


def version_table_for(names: TableNames) -> str:
    """Each set of tables needs its own version table, or upgrading a second set in the
    same database would find the shared one at head and create nothing."""
    if names == TableNames():
        return VERSION_TABLE
    return f"fsqla_version_{names.message}"  # <= 62 chars: fits PostgreSQL and MySQL


_SCRIPTS = ScriptDirectory(script_location())
HEAD_REVISION: str = _SCRIPTS.get_current_head() or ""


def _config(connection: Connection, names: TableNames) -> Config:
    config = Config()
    # ConfigParser interpolates '%' in option values.
    config.set_main_option("script_location", script_location().replace("%", "%%"))
    config.attributes["connection"] = connection
    config.attributes["table_names"] = names
    return config


async def _run(
    engine: AsyncEngine | str, fn: Callable[[Connection], T], *, reads_only: bool = False
) -> T:
    eng = create_engine(engine) if isinstance(engine, str) else engine
    try:
        await ensure_reachable(eng)  # a wrong URL is one typed error, not a driver's trace
        # a read never waits behind a writer (see drivers.base.reading)
        connecting: AbstractAsyncContextManager[AsyncConnection]
        if reads_only:
            connecting = reading(eng)
        else:
            connecting = eng.connect()
        async with connecting as conn, conn.begin():
            return await conn.run_sync(fn)
    finally:
        if eng is not engine:
            await eng.dispose()


async def upgrade_schema(
    engine: AsyncEngine | str,
    *,
    revision: str = "head",
    message_table: str = "message",
    archive_table: str = "message_archive",
) -> None:
    """Bring the tables up to `revision`. A URL gets a temporary engine; an engine is kept."""
    names = TableNames(message_table, archive_table)
    await _run(engine, lambda conn: command.upgrade(_config(conn, names), revision))


async def downgrade_schema(
    engine: AsyncEngine | str,
    *,
    revision: str = "base",
    message_table: str = "message",
    archive_table: str = "message_archive",
) -> None:
    """Take the tables down to `revision`; the default, base, drops them with their rows."""
    names = TableNames(message_table, archive_table)
    await _run(engine, lambda conn: command.downgrade(_config(conn, names), revision))


def _revision(conn: Connection, names: TableNames) -> str | None:
    opts = {"version_table": version_table_for(names)}
    return MigrationContext.configure(conn, opts=opts).get_current_revision()


async def current_revision(
    engine: AsyncEngine | str,
    *,
    message_table: str = "message",
    archive_table: str = "message_archive",
) -> str | None:
    """The revision the database is at, None if our tables were never created."""
    names = TableNames(message_table, archive_table)
    return await _run(engine, lambda conn: _revision(conn, names), reads_only=True)


def upgrade_command(engine: AsyncEngine, names: TableNames) -> str:
    """The CLI call that fixes the schema, password masked."""
    url = masked(engine.url)
    cmd = f"faststream-sqla db upgrade --url {shlex.quote(url)}"
    if names.message != TableNames().message:
        cmd += f" --message-table {names.message}"
    if names.archive != TableNames().archive:
        cmd += f" --archive-table {names.archive}"
    return cmd


_UNVERSIONED = object()


def _inspect(
    conn: Connection, tables: QueueTables
) -> tuple[list[str], dict[str, list[str]], object]:
    inspector = sa.inspect(conn)
    existing = set(inspector.get_table_names())
    ours = (
        *tables.live,
        tables.archive,
        tables.controls,
        tables.schedule,
        tables.breaker_events,
        tables.workers,
        tables.bindings,
    )
    missing = [t.name for t in ours if t.name not in existing]
    lacking: dict[str, list[str]] = {}
    for table in ours:
        if table.name in existing:
            found = {c["name"] for c in inspector.get_columns(table.name)}
            # Names only: MariaDB reflects JSON as LONGTEXT, types never compare cleanly.
            if absent := sorted(set(table.c.keys()) - found):
                lacking[table.name] = absent
    version_table = version_table_for(tables.names)
    revision = _revision(conn, tables.names) if version_table in existing else _UNVERSIONED
    return missing, lacking, revision


async def check_schema(engine: AsyncEngine, tables: QueueTables) -> None:
    """Fail early, with the fix, unless the database holds our tables at head.

    Tables without our version table are accepted when every column is there: the user
    then manages them in their own migrations.
    """
    missing, lacking, revision = await _run(
        engine, lambda conn: _inspect(conn, tables), reads_only=True
    )
    fix = f"run: {upgrade_command(engine, tables.names)}"
    if revision == HEAD_REVISION:
        # Migrated by us: the archive, the controls, the schedules, the breaker history
        # and the workers exist, though a producer granted nothing on them
        # (docs/security.md) does not see them on MariaDB.
        unseen = {
            tables.archive.name,
            tables.controls.name,
            tables.schedule.name,
            tables.breaker_events.name,
            tables.workers.name,
            tables.bindings.name,
        }
        missing = [name for name in missing if name not in unseen]
        for name in unseen:
            lacking.pop(name, None)
    elif revision is not _UNVERSIONED:
        # an older revision: tables added since are for the upgrade to create
        missing = [n for n in missing if n in (tables.message.name, tables.archive.name)]
    else:
        # hand-managed tables need the schedule table only to declare schedules, the
        # bindings table only to publish to topics, and the workers table only to list
        # the running processes (without it, a broker says once that it cannot register)
        optional = (tables.schedule.name, tables.bindings.name, tables.workers.name)
        missing = [n for n in missing if n not in optional]
    if missing:
        raise SchemaMissingError(f"table(s) {', '.join(missing)} do not exist; {fix}")
    if revision is _UNVERSIONED or revision == HEAD_REVISION:
        if lacking:  # hand-managed tables (or a head that lost a column)
            detail = "; ".join(f"{t} lacks {', '.join(cols)}" for t, cols in lacking.items())
            raise SchemaOutdatedError(f"tables are outdated ({detail}); {fix}")
        return
    found = (
        f"tables {tables.names.message}, {tables.names.archive} are at revision {revision!r} "
        f"(in {version_table_for(tables.names)}), this faststream-sqla needs {HEAD_REVISION!r}"
    )
    if revision is not None and revision not in {s.revision for s in _SCRIPTS.walk_revisions()}:
        # Upgrading cannot go back: the database was migrated by a newer release.
        fix = "upgrade the faststream-sqla package (the revision is unknown to this one)"
    raise SchemaOutdatedError(f"{found}; {fix}")
