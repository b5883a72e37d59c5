"""A redrive killed with SIGKILL midway leaves every dead letter moved or not moved,
never both and never lost, on every database."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import datetime, timedelta

import sqlalchemy as sa

from faststream_sqla import MessageState

from tests.support.helpers import rows

DEAD_LETTERS = 2000
BATCH = 50  # forty transactions: the kill lands in the middle of the run

CHILD = """
import asyncio, sys
from faststream_sqla.admin import QueueAdmin

def progress(done, total):
    if done:
        print(done, flush=True)

async def main():
    async with QueueAdmin(sys.argv[1]) as admin:
        await admin.redrive(queue="q", batch_size=int(sys.argv[2]), progress=progress)

asyncio.run(main())
"""


async def test_a_killed_redrive_moves_each_message_once_or_not_at_all(
    database_url, engine, tables
):
    a, m = tables.archive, tables.message
    at = datetime(2026, 1, 1)
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(a),
            [
                {"id": 10_000_000 + i, "queue": "q", "headers": {}, "payload": b"x",
                 "attempts_count": 3, "deliveries_count": 3, "claims_count": 3,
                 "created_at": at, "archived_at": at + timedelta(microseconds=i),
                 "state": MessageState.FAILED, "last_error": "boom", "priority": 0}
                for i in range(DEAD_LETTERS)
            ],
        )
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, database_url, str(BATCH),
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    first = await child.stdout.readline()  # one batch committed: the run is under way
    assert int(first) == BATCH
    child.send_signal(signal.SIGKILL)
    assert await child.wait() == -signal.SIGKILL

    archived = await rows(engine, a, a.c.queue == "q")
    copies = {r["redriven_from"]: r["id"] for r in await rows(engine, m, m.c.queue == "q")}
    assert len(archived) == DEAD_LETTERS  # nothing lost from the archive
    moved = [r for r in archived if r["state"] == MessageState.REDRIVEN]
    for row in archived:
        if row["state"] == MessageState.REDRIVEN:
            assert copies[row["id"]] == row["redriven_to"]  # moved, and once
        else:
            assert row["state"] == MessageState.FAILED and row["redriven_to"] is None
            assert row["id"] not in copies  # not moved, and no copy either
    assert len(copies) == len(moved)
    assert BATCH <= len(moved) < DEAD_LETTERS, "the kill should land midway"
    assert len(moved) % BATCH == 0  # whole batches only
