"""Every `faststream-sqla` command ends a usage error (a bad value given: a table or
queue name that cannot be, an unknown option) with one line and exit code 2, before it
writes anything, as docs/operations.md promises; on every database. The commands are
read from the CLI itself, so a new command is checked too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from faststream_sqla.cli import app

EXIT_USAGE = 2

#: a valid value for each required argument or option, by its name
FILLERS = {
    "message_id": "1",
    "ids": "1",
    "queue": "orders",
    "body": '{"id": 1}',
    "channel": "acme",
    "name": "nightly",
    "older_than": "30d",
    "pattern": "orders.*",
    "topic": "orders.created",
    "endpoint_url": "http://127.0.0.1:9/hook",
}
#: optional ones without which a command refuses to run at all
NEEDED = {"ids": "1", "max_concurrency": "2", "timeout": "10"}


def leaf_commands() -> list[tuple[list[str], Any]]:
    found = []

    def walk(command: Any, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        if not hasattr(command, "commands"):
            found.append((path, command))

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = leaf_commands()
COMMAND_IDS = [" ".join(path) for path, _ in COMMANDS]
QUEUE_COMMANDS = [
    (path, command) for path, command in COMMANDS if any(p.name == "queue" for p in command.params)
]


def argv(path: list[str], command: Any, url: str, **given: str) -> list[str]:
    """The command line: `given` values, else a valid filler for every required one."""
    args: list[str] = [*path]
    for param in command.params:
        value = given.get(param.name)
        if param.name == "url":
            value = url
        elif value is None and param.required:
            value = FILLERS[param.name]
        elif value is None:
            value = NEEDED.get(param.name)
        if value is None:
            continue
        if param.param_type_name == "argument":
            args.append(value)
        else:
            args += [param.opts[0], value]
    return args


async def invoke(args: list[str]) -> Any:
    # in a thread: the command runs its own event loop, as from a shell
    return await asyncio.to_thread(CliRunner().invoke, app, args)


def assert_usage_error(result: Any, names: str) -> None:
    output = result.output
    assert result.exit_code == EXIT_USAGE, output
    assert "Traceback" not in output, output
    assert names in output.lower(), output


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=COMMAND_IDS)
async def test_a_bad_table_name_is_a_usage_error(path, command, database_url):
    result = await invoke(argv(path, command, database_url, message_table="no such table!"))
    assert_usage_error(result, "table name")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=COMMAND_IDS)
async def test_an_unknown_option_is_a_usage_error(path, command, database_url):
    result = await invoke([*argv(path, command, database_url), "--no-such-option"])
    assert_usage_error(result, "no such option")


@pytest.mark.parametrize(
    ("path", "command"), QUEUE_COMMANDS, ids=[" ".join(p) for p, _ in QUEUE_COMMANDS]
)
@pytest.mark.parametrize("queue", ["", "q" * 300], ids=["empty", "300 characters"])
async def test_a_queue_name_that_cannot_be_is_a_usage_error(path, command, queue, database_url):
    result = await invoke(argv(path, command, database_url, queue=queue))
    assert_usage_error(result, "queue")
