"""`faststream-sqla db ...`: create, upgrade and inspect the queue tables."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.migrations import (
    HEAD_REVISION,
    current_revision,
    downgrade_schema,
    upgrade_schema,
)
from faststream_sqla.schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE

from .common import ArchiveTable, MessageTable, Url, app, names_of, out, run

db = typer.Typer(help="Create, upgrade and inspect the queue tables.", no_args_is_help=True)
app.add_typer(db, name="db")


@db.command()
def upgrade(
    url: Url,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
    partition_archive: Annotated[
        bool,
        typer.Option(
            "--partition-archive",
            help="PostgreSQL: also partition the archive by month (docs/operations.md).",
        ),
    ] = False,
) -> None:
    """Create the tables or bring them up to date (safe to run on every deploy)."""
    names = names_of(message_table, archive_table)
    kw = {"message_table": names.message, "archive_table": names.archive}

    async def action(engine: AsyncEngine) -> str | None:
        await upgrade_schema(engine, revision=revision, **kw)
        if partition_archive:
            from faststream_sqla.admin import QueueAdmin

            await QueueAdmin(
                engine, message_table=names.message, archive_table=names.archive
            ).partition_archive()
        return await current_revision(engine, **kw)

    reached = run(url, action, may_create=True)
    out.print(f"Tables {names.message}, {names.archive} at revision {reached}.")


@db.command()
def downgrade(
    url: Url,
    revision: Annotated[str, typer.Option(help="Target revision; base drops the tables.")] = "base",
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Undo migrations. Dropped tables take their messages with them."""
    names = names_of(message_table, archive_table)
    kw = {"message_table": names.message, "archive_table": names.archive}
    if not yes:
        typer.confirm(
            f"Downgrade {names.message}, {names.archive} to {revision}? Data may be lost.",
            abort=True,
        )

    async def action(engine: AsyncEngine) -> str | None:
        await downgrade_schema(engine, revision=revision, **kw)
        return await current_revision(engine, **kw)

    now = run(url, action)
    out.print(f"Tables {names.message}, {names.archive} at revision {now or 'base (dropped)'}.")


@db.command()
def current(
    url: Url,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Show the revision the tables are at."""
    names = names_of(message_table, archive_table)

    async def action(engine: AsyncEngine) -> str | None:
        return await current_revision(
            engine, message_table=names.message, archive_table=names.archive
        )

    revision = run(url, action)
    if revision is None:
        out.print("none (tables not created; run: faststream-sqla db upgrade)")
    elif revision == HEAD_REVISION:
        out.print(f"{revision} (head)")
    else:
        out.print(f"{revision} (head is {HEAD_REVISION}; run: faststream-sqla db upgrade)")
