"""Correlation ids come from the broker's `id_generator=`, as FastStream's other brokers take
it, on every database."""

from __future__ import annotations

import pytest

from faststream_sqla import SqlaBroker
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.helpers import recording


# -- id_generator=, as FastStream's other brokers take it -----------------------------------
async def test_id_generator_makes_the_correlation_ids(database_url, make_broker, engine, tables):
    made = iter(f"order-{n}" for n in range(100))
    broker = make_broker(id_generator=lambda: next(made))
    got = recording(broker, "q", record=lambda body, msg: (body, msg.correlation_id))

    async with broker:
        await broker.start()
        await broker.publish("one", queue="q")
        await broker.publisher("q").publish("two")
        await broker.publish_batch("three", "four", queue="q")
        await broker.publish("mine", queue="q", correlation_id="given")
        handled = dict(await got.wait_for(5))
    assert handled == {
        "one": "order-0", "two": "order-1", "three": "order-2-0", "four": "order-2-1",
        "mine": "given",
    }
    with pytest.raises(InvalidOptionError, match="id_generator"):
        SqlaBroker(database_url, id_generator="uuid")  # type: ignore[arg-type]
