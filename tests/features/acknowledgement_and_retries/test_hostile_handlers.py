"""Handlers that hang, raise on every call or leak memory: the subscriber keeps serving
the other messages, and the hanging and raising ones end FAILED (the dead letters)
with their cause recorded."""

from __future__ import annotations

import asyncio

import pytest

from faststream_sqla import HandlerTimeoutError, InvalidOptionError, MessageState, SqlaBroker
from faststream_sqla.retry import ConstantRetryStrategy

from tests.support.helpers import FAST, Recorder, rows, wait_until

TWO_TRIES = ConstantRetryStrategy(delay_seconds=0, max_attempts=2)
LEAKED: list[bytearray] = []


async def test_hostile_handlers_do_not_stop_the_others(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    served = Recorder()

    @broker.subscriber(
        "jobs", max_workers=3, handler_timeout=0.5, retry_strategy=TWO_TRIES, **FAST
    )
    async def handle(body: str) -> None:
        if body == "hang":
            await asyncio.Event().wait()  # never set: only the timeout ends it
        if body == "raise":
            raise RuntimeError("fails on every call")
        if body.startswith("leak"):
            LEAKED.append(bytearray(1 << 20))  # a megabyte kept per call
        served.record(body)

    others = [f"ok-{i}" for i in range(30)] + [f"leak-{i}" for i in range(10)]
    async with broker:
        await broker.start()
        ids = await broker.publish_batch("hang", "raise", *others, queue="jobs")
        await served.wait_for(len(others))

        async def all_settled() -> bool:
            return len(await rows(engine, tables.archive)) == len(ids)

        await wait_until(all_settled)
    LEAKED.clear()
    archive = {row["id"]: row for row in await rows(engine, tables.archive)}
    hung, raised = archive[ids[0]], archive[ids[1]]
    assert (hung["state"], hung["attempts_count"]) == (MessageState.FAILED, 2)
    assert hung["last_error"].startswith("HandlerTimeoutError")
    assert (raised["state"], raised["attempts_count"]) == (MessageState.FAILED, 2)
    assert raised["last_error"].startswith("RuntimeError: fails on every call")
    assert {archive[i]["state"] for i in ids[2:]} == {MessageState.COMPLETED}
    assert sorted(served.calls) == sorted(others)


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), 10**9, "5", True])
def test_handler_timeout_has_bounds(value):
    broker = SqlaBroker("sqlite+aiosqlite:///unused.db")
    with pytest.raises(InvalidOptionError, match="handler_timeout"):
        broker.subscriber("jobs", handler_timeout=value)


def test_the_timeout_error_is_a_timeout_and_ours():
    assert issubclass(HandlerTimeoutError, TimeoutError)
