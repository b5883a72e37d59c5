"""A broker whose subscriber on "q" has one worker that a test holds inside the handler,
and the claims whose outcomes the broker writes: for tests of what happens to messages
claimed, held and running while the database changes under them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from faststream_sqla import MessageState, SqlaBroker
from faststream_sqla.annotations import SqlaMessage
from tests.support.helpers import FAST, LogLines, Recorder, captured_logger, rows, wait_until

#: longer than any test: release-stuck frees nothing
NEVER = 3600.0


class Gate:
    """Where a handler waits: `running` is set once it is there, `finish` lets it go."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.finish = asyncio.Event()

    async def pass_through(self) -> None:
        self.running.set()
        await self.finish.wait()


def one_worker_broker(
    make_broker: Callable[..., SqlaBroker],
    logger_name: str,
    gate_for: Callable[[str, int], Gate | None],
) -> tuple[SqlaBroker, Recorder, LogLines]:
    """A broker logging to `logger_name` whose subscriber on "q" has one worker and
    records `(body, deliveries_count)`; a call waits at `gate_for(body, deliveries)`
    unless that is None. Returns the broker, the recorder and what it logs."""
    logger, lines = captured_logger(logger_name)
    broker = make_broker(logger=logger)
    got = Recorder()

    @broker.subscriber("q", max_workers=1, release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.deliveries_count))
        if (gate := gate_for(body, msg.deliveries_count)) is not None:
            await gate.pass_through()

    return broker, got, lines


async def start_recording_writes(broker: SqlaBroker) -> list[tuple[int, int]]:
    """Start the entered `broker`; the (id, token) of every outcome it writes, in order."""
    await broker.connect()
    driver = broker.config.driver
    write = driver.write_outcomes
    written: list[tuple[int, int]] = []

    async def recorded(engine: Any, outcomes: Any) -> int:
        written.extend((o.id, o.token) for o in outcomes)
        return await write(engine, outcomes)

    driver.write_outcomes = recorded  # type: ignore[method-assign]
    await broker.start()
    return written


async def second_waits_behind_first(
    broker: SqlaBroker, engine: Any, table: Any, first: Gate
) -> int:
    """Publish "first" and "second"; once "first" holds the only worker and both are
    claimed ("second" waiting in the buffer), the id of "second"."""
    await broker.publish_batch("first", "second", queue="q")
    await first.running.wait()

    async def both_claimed() -> bool:
        found = await rows(engine, table)
        return len(found) == 2 and all(r["state"] == MessageState.PROCESSING for r in found)

    await wait_until(both_claimed)
    return max(r["id"] for r in await rows(engine, table))
