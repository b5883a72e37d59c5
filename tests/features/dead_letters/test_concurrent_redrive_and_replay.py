"""Redrives and replays run at the same moment in separate processes move each archived
message exactly once, on every database: through the CLI (which owns its engine) and
through a user's own engine (whose reads, on SQLite, run outside the transaction)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from faststream_sqla import MessageState

from tests.support.helpers import rows

ARCHIVED = 500
FIRST_ID = 20_000_000

# Each child imports and connects first, says "ready", then waits for one line on stdin,
# so the moves start together rather than a process start-up apart.
CLI_CHILD = """
import sys
import typer
from faststream_sqla.cli import app
command = typer.main.get_command(app)
print("ready", flush=True)
sys.stdin.readline()
command(sys.argv[1:], prog_name="faststream-sqla")
"""

USER_ENGINE_CHILD = """
import asyncio, json, sys
from sqlalchemy.ext.asyncio import create_async_engine
from faststream_sqla import InvalidOptionError
from faststream_sqla.admin import QueueAdmin

async def main(url, verb, by):
    engine = create_async_engine(url)
    admin = QueueAdmin(engine)
    await admin.queue_names()  # the schema check and a connection, before the barrier
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    move = admin.redrive if verb == "redrive" else admin.replay
    try:
        if by == "ids":
            result = await move(ids=[int(i) for i in sys.argv[4:]])
        else:
            result = await move(queue="q")
    except InvalidOptionError as e:
        sys.exit(str(e))  # exit 1, the message on stderr
    print(json.dumps({"moved": {str(k): v for k, v in result.moved.items()}}), flush=True)
    await engine.dispose()

asyncio.run(main(*sys.argv[1:4]))
"""


async def archive(engine, tables, state: MessageState) -> list[int]:
    at = datetime(2026, 1, 1)
    ids = [FIRST_ID + i for i in range(ARCHIVED)]
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(tables.archive),
            [
                {"id": i, "queue": "q", "headers": {}, "payload": str(i).encode(),
                 "attempts_count": 3, "deliveries_count": 3, "claims_count": 3,
                 "created_at": at, "archived_at": at + timedelta(microseconds=i - FIRST_ID),
                 "state": state, "last_error": "boom", "priority": 0}
                for i in ids
            ],
        )
    return ids


async def run_together(commands: list[list[str]]) -> list[dict]:
    """Start every child, wait until each is ready, release them at once; what each
    moved. A mover by ids that checks them after another moved them all is refused
    whole (nothing moved, exit 2: a value that cannot work), as a redrive of an already
    moved message is."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable, *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for command in commands
    ]
    for child in children:
        assert child.stdout is not None
        assert await child.stdout.readline() == b"ready\n"
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        await child.stdin.drain()
    results = []
    for child in children:
        out, errors = await child.communicate()
        if child.returncode == 2 and b"already moved back" in errors:
            results.append({"moved": {}})
            continue
        assert child.returncode == 0, errors.decode()
        results.append(json.loads(out))
    return results


async def assert_each_moved_once(engine, tables, ids: list[int], results: list[dict]) -> None:
    m, a = tables.message, tables.archive
    reported = [int(old) for result in results for old in result["moved"]]
    assert sorted(reported) == ids, "every message reported moved by exactly one process"
    copies = await rows(engine, m, m.c.queue == "q")
    assert sorted(r["redriven_from"] for r in copies) == ids, "one copy of each, no more"
    copy_of = {r["redriven_from"]: r["id"] for r in copies}
    for row in await rows(engine, a, a.c.queue == "q"):
        assert row["state"] == MessageState.REDRIVEN
        assert row["redriven_to"] == copy_of[row["id"]]


def cli(database_url: str, verb: str, by: str, ids: list[int]) -> list[str]:
    command = ["dlq", "redrive"] if verb == "redrive" else ["replay"]
    chosen = [str(i) for i in ids] if by == "ids" else ["--queue", "q"]
    return ["-c", CLI_CHILD, *command, *chosen, "--url", database_url, "--json"]


@pytest.mark.parametrize(
    ("verb", "by", "processes"),
    [
        ("redrive", "queue", 2),
        ("redrive", "ids", 3),
        ("replay", "queue", 3),
        ("replay", "ids", 2),
    ],
)
async def test_commands_run_at_once_move_each_message_once(
    database_url, engine, tables, verb, by, processes
):
    state = MessageState.FAILED if verb == "redrive" else MessageState.COMPLETED
    ids = await archive(engine, tables, state)
    results = await run_together([cli(database_url, verb, by, ids)] * processes)
    await assert_each_moved_once(engine, tables, ids, results)


@pytest.mark.parametrize(("verb", "by"), [("redrive", "queue"), ("replay", "ids")])
async def test_moves_on_users_own_engines_at_once_move_each_message_once(
    database_url, engine, tables, verb, by
):
    state = MessageState.FAILED if verb == "redrive" else MessageState.COMPLETED
    ids = await archive(engine, tables, state)
    command = ["-c", USER_ENGINE_CHILD, database_url, verb, by, *map(str, ids)]
    results = await run_together([command] * 3)
    await assert_each_moved_once(engine, tables, ids, results)
