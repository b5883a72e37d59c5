"""A queue's circuit breaker across worker processes: when the process holding the
probe is killed, the probe is taken over by a process that can run it now, not by one
whose workers all hang on the failing downstream. On every database."""

from __future__ import annotations

import asyncio
import signal
import sys
from contextlib import AsyncExitStack

import pytest
import sqlalchemy as sa

from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import MessageState

from tests.support.helpers import rows, wait_until
from tests.support.processes import WORKERS, exit_code, read_line, spawn

# three worker processes, each waited for line by line on a loaded CI host
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORKER = WORKERS / "downstream.py"
QUEUE = "downstream"


async def later_line(proc: asyncio.subprocess.Process, log) -> str:
    """The next line of a process that first waits out a cooldown or a silent-holder
    timeout (seconds on its own): a longer deadline than read_line's."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 90)
    assert line, f"subprocess exited early:\n{log.read_text()}"
    return line.decode().strip()


async def breaker_state(admin: QueueAdmin) -> str:
    (status,) = await admin.breakers(QUEUE)
    return status.state


async def test_a_killed_probe_holder_is_replaced_by_a_process_with_an_idle_worker(
    database_url, engine, tables, tmp_path
):
    """Threshold 3, cooldown 3 s, 5 s lease, three processes of two workers each. Both
    workers of one process hang in handlers started before the breaker opened; another
    process probes and is killed midway; the third, idle, must take the probe over, and
    the breaker closes while the hanging handlers still run."""
    logs = {name: tmp_path / f"{name}.log" for name in ("busy", "holder", "idle")}
    async with AsyncExitStack() as stack:
        admin = await stack.enter_async_context(QueueAdmin(engine))
        publisher = await stack.enter_async_context(SqlaBroker(database_url))
        await publisher.connect()

        async def start(name: str) -> asyncio.subprocess.Process:
            proc = await stack.enter_async_context(
                spawn(sys.executable, WORKER, database_url, log=logs[name],
                      stdin=asyncio.subprocess.PIPE)
            )
            assert await read_line(proc, logs[name]) == "READY"
            assert proc.stdin is not None
            proc.stdin.write(b"GO\n")
            await proc.stdin.drain()
            return proc

        busy = await start("busy")
        await publisher.publish_batch("hang", "hang", queue=QUEUE)
        for _ in range(2):
            assert await read_line(busy, logs["busy"]) == "STARTED hang 1"

        # Three failures just counted: OPEN, its reopening due after the cooldown.
        async with engine.begin() as conn:
            await conn.execute(tables.controls.insert().values(
                queue=QUEUE, channel="", updated_at=utc_now(), breaker_state="OPEN",
                breaker_failures=3, breaker_changed_at=utc_now(),
                breaker_reopens_at=utc_now(3.0),
            ))
        await publisher.publish("probe", queue=QUEUE)
        holder = await start("holder")
        # after the cooldown the holder probes; the downstream hangs on it as well
        assert await later_line(holder, logs["holder"]) == "STARTED probe 1"
        (status,) = await admin.breakers(QUEUE)
        assert status.state == "HALF_OPEN" and f":{holder.pid}:" in (status.probe_holder or "")

        idle = await start("idle")
        holder.send_signal(signal.SIGKILL)
        assert await holder.wait() == -signal.SIGKILL

        # The holder's lease lapses, it falls silent, and the idle process probes again;
        # the downstream has recovered.
        assert await later_line(idle, logs["idle"]) == "STARTED probe 2"
        await wait_until(lambda: _closed(admin), timeout=60)
        history = [(t.from_state, t.to_state, t.reason)
                   for t in reversed(await admin.breaker_history(QUEUE))]
        assert history[-2:] == [
            ("HALF_OPEN", "HALF_OPEN", "probe holder silent"),
            ("HALF_OPEN", "CLOSED", "probe succeeded"),
        ]
        # the busy process's handlers still hang: the probe did not wait for them
        m = tables.message
        hanging = await rows(engine, m, m.c.queue == QUEUE, m.c.payload == b"hang")
        assert [r["state"] for r in hanging] == [MessageState.PROCESSING] * 2

        for proc in (busy, idle):
            assert proc.stdin is not None
            proc.stdin.write(b"release\n")
            await proc.stdin.drain()
        await wait_until(lambda: _all_completed(engine, tables))
        for name, proc in (("busy", busy), ("idle", idle)):
            proc.send_signal(signal.SIGTERM)
            assert await exit_code(proc) == 0, logs[name].read_text()


async def _closed(admin: QueueAdmin) -> bool:
    return await breaker_state(admin) == "CLOSED"


async def _all_completed(engine, tables) -> bool:
    a = tables.archive
    async with engine.connect() as conn:
        done = await conn.scalar(
            sa.select(sa.func.count()).select_from(a).where(
                a.c.queue == QUEUE, a.c.state == MessageState.COMPLETED
            )
        )
    return done == 3
