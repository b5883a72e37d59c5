"""`faststream-sqla` command line: manage the queue tables."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from .exceptions import InvalidOptionError, SqlaBrokerError
from .urls import mask_passwords, masked, parse_url
from .migrations import HEAD_REVISION, current_revision, downgrade_schema, upgrade_schema
from .schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE, TableNames

T = TypeVar("T")

app = typer.Typer(
    name="faststream-sqla", help="FastStream broker on SQL databases.", no_args_is_help=True
)
db = typer.Typer(help="Create, upgrade and inspect the queue tables.", no_args_is_help=True)
app.add_typer(db, name="db")

# soft_wrap: URLs and commands in messages must stay copy-pasteable.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

Url = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="FASTSTREAM_SQLA_URL",
        help="SQLAlchemy async URL, e.g. postgresql+asyncpg://user:pass@host/db",
        show_default=False,
    ),
]
MessageTable = Annotated[str, typer.Option("--message-table", help="Name of the message table.")]
ArchiveTable = Annotated[str, typer.Option("--archive-table", help="Name of the archive table.")]


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]Error:[/] {escape(message)}", highlight=False)
    return typer.Exit(1)


def _run(url: str, action: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Run `action` on an engine for `url`, turning every expected failure into exit 1."""
    try:
        engine = create_async_engine(parse_url(url))
    except InvalidOptionError as e:
        raise _fail(str(e)) from None
    except (sa.exc.ArgumentError, sa.exc.InvalidRequestError, ImportError) as e:
        # unknown dialect, sync driver or driver not installed
        raise _fail(f"invalid database URL {masked(url)}: {mask_passwords(str(e))}") from None
    shown = engine.url.render_as_string(hide_password=True)

    async def go() -> T:
        try:
            return await action(engine)
        except Exception:
            if engine.dialect.driver == "aiosqlite":
                # After a failed connect aiosqlite stops its worker thread without waiting;
                # closing the loop before the thread reports back makes it die with a traceback.
                await asyncio.sleep(0.1)
            raise
        finally:
            await engine.dispose()

    try:
        return asyncio.run(go())
    except Exception as e:  # noqa: BLE001 - drivers raise their own types (asyncpg on connect)
        reason = e.orig if isinstance(e, sa.exc.DBAPIError) else e
        raise _fail(
            f"database {shown}: {type(reason).__name__}: {mask_passwords(str(reason))}"
        ) from None


def _names(message_table: str, archive_table: str) -> TableNames:
    try:
        return TableNames(message_table, archive_table)
    except SqlaBrokerError as e:
        raise _fail(str(e)) from None


@db.command()
def upgrade(
    url: Url,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Create the tables or bring them up to date (safe to run on every deploy)."""
    names = _names(message_table, archive_table)
    kw = {"message_table": names.message, "archive_table": names.archive}

    async def action(engine: AsyncEngine) -> str | None:
        await upgrade_schema(engine, revision=revision, **kw)
        return await current_revision(engine, **kw)

    out.print(f"Tables {names.message}, {names.archive} at revision {_run(url, action)}.")


@db.command()
def downgrade(
    url: Url,
    revision: Annotated[str, typer.Option(help="Target revision; base drops the tables.")] = "base",
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Undo migrations. Dropped tables take their messages with them."""
    names = _names(message_table, archive_table)
    kw = {"message_table": names.message, "archive_table": names.archive}
    if not yes:
        typer.confirm(
            f"Downgrade {names.message}, {names.archive} to {revision}? Data may be lost.",
            abort=True,
        )

    async def action(engine: AsyncEngine) -> str | None:
        await downgrade_schema(engine, revision=revision, **kw)
        return await current_revision(engine, **kw)

    now = _run(url, action)
    out.print(f"Tables {names.message}, {names.archive} at revision {now or 'base (dropped)'}.")


@db.command()
def current(
    url: Url,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Show the revision the tables are at."""
    names = _names(message_table, archive_table)

    async def action(engine: AsyncEngine) -> str | None:
        return await current_revision(
            engine, message_table=names.message, archive_table=names.archive
        )

    revision = _run(url, action)
    if revision is None:
        out.print("none (tables not created; run: faststream-sqla db upgrade)")
    elif revision == HEAD_REVISION:
        out.print(f"{revision} (head)")
    else:
        out.print(f"{revision} (head is {HEAD_REVISION}; run: faststream-sqla db upgrade)")


def main() -> None:
    app()
