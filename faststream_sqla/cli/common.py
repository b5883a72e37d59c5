"""What every `faststream-sqla` command shares: the app, the consoles, the `--url`
option, and how failures end (one line, password masked, a meaningful exit code)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, TypeVar

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.admin import QueueAdmin, to_json
from faststream_sqla.connecting import create_engine, missing_sqlite_file
from faststream_sqla.durations import integer
from faststream_sqla.exceptions import (
    DatabaseUnreachableError,
    InvalidOptionError,
    SqlaBrokerError,
    shown,
)
from faststream_sqla.schema import (
    DEFAULT_ARCHIVE_TABLE,
    DEFAULT_MESSAGE_TABLE,
    TableNames,
    validate_queue_name,
)
from faststream_sqla.urls import mask_passwords, masked

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
ReadUrl = Annotated[
    str | None,
    typer.Option(
        "--read-url",
        envvar="FASTSTREAM_SQLA_READ_URL",
        help="A replica of the database to read from; changes still go to --url.",
        show_default=False,
    ),
]
MessageTable = Annotated[str, typer.Option("--message-table", help="Name of the message table.")]
ArchiveTable = Annotated[str, typer.Option("--archive-table", help="Name of the archive table.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON, for scripts.")]


def integer_in(low: int | None = None, high: int | None = None) -> Callable[[object], int]:
    """The `parser=` of an integer option or argument, `low` to `high`: ASCII digits
    only, as everywhere (click's own int type takes any script's digits)."""

    def integer_value(given: object) -> int:
        number = given if isinstance(given, int) else integer(str(given))
        if number is None:
            raise typer.BadParameter(f"{shown(given)} is not a whole number (digits 0-9)")
        if (low is not None and number < low) or (high is not None and number > high):
            lowest = "" if low is None else f"{low}<="
            highest = "" if high is None else f"<={high}"
            raise typer.BadParameter(f"{number} is not in the range {lowest}x{highest}.")
        return number

    integer_value.__name__ = "integer"  # the metavar when none is given: INTEGER
    return integer_value


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    err.print(f"[bold red]Error:[/] {escape(mask_passwords(message))}", highlight=False)
    return typer.Exit(code)


def usage_error(message: str) -> NoReturn:
    raise fail(message, EXIT_USAGE)


def run(url: str, action: Callable[[AsyncEngine], Awaitable[T]], *, may_create: bool = False) -> T:
    """Run `action` on an engine for `url`, turning every expected failure into one
    line and exit 1. Only a command that `may_create` a database (`db upgrade`) may
    name a SQLite file that does not exist yet."""
    try:
        # unknown driver, sync driver or driver not installed: the async one to use
        engine = create_engine(url)
    except InvalidOptionError as e:
        raise fail(str(e)) from None
    if not may_create and (missing := missing_sqlite_file(engine.url)) is not None:
        raise fail(
            f"no SQLite database at {missing} (the file does not exist); check the path, "
            f"or create the tables there with: faststream-sqla db upgrade --url {masked(url)}"
        )
    shown = masked(engine.url)

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
    except InvalidOptionError as e:  # a value given that cannot work: bad usage
        raise fail(str(e), EXIT_USAGE) from None
    except SqlaBrokerError as e:  # ours: the message names the problem already
        raise fail(str(e)) from None
    except Exception as e:
        reason = e.orig if isinstance(e, sa.exc.DBAPIError) else e
        raise fail(
            f"database {shown}: {type(reason).__name__}: {mask_passwords(str(reason))}"
        ) from None


def queue_name(name: str) -> str:
    """`name` if it can be a queue's; else a usage error naming the problem (checked
    before a command connects, asks for confirmation or starts anything)."""
    try:
        return validate_queue_name(name)
    except InvalidOptionError as e:
        usage_error(str(e))


def names_of(message_table: str, archive_table: str) -> TableNames:
    try:
        return TableNames(message_table, archive_table)
    except SqlaBrokerError as e:
        raise fail(str(e), EXIT_USAGE) from None


def with_admin(
    url: str,
    message_table: str,
    archive_table: str,
    action: Callable[[QueueAdmin], Awaitable[T]],
    *,
    read_url: str | None = None,
    json_output: bool = False,
) -> T:
    """Run `action` on an admin of `url`; with `read_url`, its reads go to that replica
    and the replica's lag is printed first (on stderr with --json, so stdout stays
    JSON)."""
    names = names_of(message_table, archive_table)

    async def go(engine: AsyncEngine) -> T:
        admin = QueueAdmin(
            engine, message_table=names.message, archive_table=names.archive, read_url=read_url
        )
        # The command made this engine: it gets the settings of an engine the broker owns
        # (on SQLite, write transactions that take the write lock when they begin).
        admin.driver.configure_engine(engine, owned=True)
        if read_url is not None and (missing := missing_sqlite_file(admin.read_engine.url)):
            # connecting would create an empty file there
            msg = f"no SQLite database at {missing} (the file does not exist): check --read-url"
            raise InvalidOptionError(msg)
        try:
            if read_url is not None:
                lag = await _on_replica(read_url, admin.replica_lag())
                (err if json_output else out).print(escape(str(lag)), highlight=False)
            return await action(admin)
        finally:
            await admin.close()

    return run(url, go)


async def _on_replica(read_url: str, step: Awaitable[T]) -> T:
    """`step`, its failure naming the replica rather than the primary."""
    try:
        return await step
    except SqlaBrokerError:
        raise
    except Exception as e:
        reason = e.orig if isinstance(e, sa.exc.DBAPIError) else e
        msg = f"replica {masked(read_url)}: {type(reason).__name__}: {mask_passwords(str(reason))}"
        raise DatabaseUnreachableError(msg) from None


def print_json(value: Any) -> None:
    typer.echo(json.dumps(to_json(value), indent=2))


@dataclass(frozen=True)
class Admin:
    """The options every admin command shares, as its body uses them: `admin(action)`
    runs one action on a `QueueAdmin`; `json_output` is --json."""

    url: str
    json_output: bool
    message_table: str
    archive_table: str
    #: --read-url, on the commands that only read
    read_url: str | None = None

    def __call__(self, action: Callable[[QueueAdmin], Awaitable[T]]) -> T:
        return with_admin(
            self.url,
            self.message_table,
            self.archive_table,
            action,
            read_url=self.read_url,
            json_output=self.json_output,
        )

    def printed_json_or_empty(self, found: Any, empty: str, items: Any = None) -> bool:
        """True when `found` is printed in full already: as JSON for --json, else as the
        line `empty` when there is nothing (in `items`, a page's, or `found` itself)."""
        if self.json_output:
            print_json(found)
            return True
        if not (found if items is None else items):
            out.print(empty)
            return True
        return False

    def check_tables(self) -> None:
        """A usage error for a bad table name, before a question is asked."""
        names_of(self.message_table, self.archive_table)


def _option(
    name: str, annotation: Any, default: Any = inspect.Parameter.empty
) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
    )


#: the options an admin command takes before its own (--url, and --read-url on those
#: that only read) and after them
_FIRST = [_option("url", Url)]
_READS = [_option("read_url", ReadUrl, None)]
_LAST = [
    _option("json_output", Json, False),
    _option("message_table", MessageTable, DEFAULT_MESSAGE_TABLE),
    _option("archive_table", ArchiveTable, DEFAULT_ARCHIVE_TABLE),
]


def admin_command(
    group: typer.Typer, name: str | None = None, *, reads: bool = False
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a command in `group` (named `name`, else as the function) that takes
    --url first (and --read-url, for a command that only `reads`), then its own
    arguments and options, then --json, --message-table and --archive-table; the
    function gets those as one `Admin`, its first argument."""

    def register(command: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]
        first = _FIRST + (_READS if reads else [])
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in first + own + _LAST]

        @functools.wraps(command)
        def wrapper(
            *,
            url: str,
            json_output: bool,
            message_table: str,
            archive_table: str,
            read_url: str | None = None,
            **given: Any,
        ) -> None:
            admin = Admin(url, json_output, message_table, archive_table, read_url)
            return command(admin, **given)

        del wrapper.__wrapped__  # typer reads the signature below, not the function's
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        group.command(name)(wrapper)
        return wrapper

    return register
