"""The probe statements of drivers/controls.py on every database: the worker tests
reach keep_probe only when a probe outlasts a control read, which timing decides."""

from __future__ import annotations

from faststream_sqla.drivers import controls
from faststream_sqla.schema import WHOLE_QUEUE, BreakerState

from tests.support.helpers import due_channel_breaker


async def test_a_probe_is_taken_kept_and_handed_back(engine, driver, tables):
    await due_channel_breaker(engine, tables, "q", WHOLE_QUEUE, BreakerState.OPEN, failures=3)

    assert await controls.take_probe(driver, engine, "q", "me", silent_after=None)
    # the breaker is HALF_OPEN now: no second winner
    assert not await controls.take_probe(driver, engine, "q", "other", silent_after=None)
    assert await controls.keep_probe(driver, engine, "q", "me")
    assert not await controls.keep_probe(driver, engine, "q", "other")

    assert await controls.hand_back_probe(driver, engine, "q", "me")
    assert not await controls.keep_probe(driver, engine, "q", "me")
    async with engine.connect() as conn:
        reading = (await controls.controls_among(conn, tables, ["q"], 60.0))["q"]
        history = await controls.breaker_events(conn, tables, "q", 10)
    assert reading.breaker.state is BreakerState.OPEN and reading.breaker.probe is None
    assert reading.reopening_due
    assert [(e.from_state, e.to_state, e.reason) for e in history] == [
        ("HALF_OPEN", "OPEN", "probe holder stopped"),
        ("OPEN", "HALF_OPEN", "cooldown over"),
    ]
