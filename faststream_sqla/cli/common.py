"""What every `faststream-sqla` command shares: the app, the consoles, the `--url`
option, and how failures end (one line, password masked, a meaningful exit code)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, NoReturn, TypeVar

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla.exceptions import InvalidOptionError, SqlaBrokerError
from faststream_sqla.schema import TableNames
from faststream_sqla.urls import mask_passwords, masked, parse_url

T = TypeVar("T")

#: exit codes: done, failed, bad usage (as click's own usage errors)
EXIT_FAILED, EXIT_USAGE = 1, 2

app = typer.Typer(
    name="faststream-sqla", help="FastStream broker on SQL databases.", no_args_is_help=True
)

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


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    err.print(f"[bold red]Error:[/] {escape(mask_passwords(message))}", highlight=False)
    return typer.Exit(code)


def usage_error(message: str) -> NoReturn:
    raise fail(message, EXIT_USAGE)


def run(url: str, action: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Run `action` on an engine for `url`, turning every expected failure into one
    line and exit 1."""
    try:
        engine = create_async_engine(parse_url(url))
    except InvalidOptionError as e:
        raise fail(str(e)) from None
    except (sa.exc.ArgumentError, sa.exc.InvalidRequestError, ImportError) as e:
        # unknown dialect, sync driver or driver not installed
        raise fail(f"invalid database URL {masked(url)}: {mask_passwords(str(e))}") from None
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
    except SqlaBrokerError as e:  # ours: the message names the problem already
        raise fail(str(e)) from None
    except Exception as e:  # noqa: BLE001 - drivers raise their own types (asyncpg on connect)
        reason = e.orig if isinstance(e, sa.exc.DBAPIError) else e
        raise fail(
            f"database {shown}: {type(reason).__name__}: {mask_passwords(str(reason))}"
        ) from None


def names_of(message_table: str, archive_table: str) -> TableNames:
    try:
        return TableNames(message_table, archive_table)
    except SqlaBrokerError as e:
        raise fail(str(e)) from None
