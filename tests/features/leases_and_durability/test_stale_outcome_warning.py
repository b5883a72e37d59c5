"""A stale-outcome warning names its likely cause: after a lost
connection, an outcome written again finds its own first write, not release-stuck."""

from __future__ import annotations

from faststream_sqla import MessageState
from tests.support.helpers import captured_logger, recording, rows, wait_until


async def test_an_outcome_written_again_after_a_lost_reply_is_not_blamed_on_release_stuck(
    make_broker, dialect_name, engine, tables
):
    logger, lines = captured_logger(f"test.stale.{dialect_name}")
    broker = make_broker(logger=logger)
    got = recording(broker, "q")

    async with broker:
        await broker.connect()
        driver = broker.config.driver
        write = driver.write_outcomes
        calls = 0

        async def commit_then_lose_the_reply(engine_, outcomes):
            # The write commits; then the connection drops before its reply arrives,
            # as when the server restarts at that moment.
            nonlocal calls
            calls += 1
            changed = await write(engine_, outcomes)
            if calls == 1:
                raise ConnectionResetError("connection lost before the commit's reply")
            return changed

        driver.write_outcomes = commit_then_lose_the_reply  # type: ignore[method-assign]
        await broker.start()
        await broker.publish("once", queue="q")
        await got.wait_for(1)

        async def archived() -> bool:
            return bool(await rows(engine, tables.archive))

        async def written_twice() -> bool:
            return calls >= 2

        await wait_until(archived)
        await wait_until(written_twice)
    (row,) = await rows(engine, tables.archive)
    assert row["state"] == MessageState.COMPLETED
    warned = [m for m in lines.messages if "changed nothing" in m or "stale" in m]
    assert len(warned) == 1, lines.messages
    assert "written again after a lost connection" in warned[0]
    assert "release-stuck" not in warned[0]
