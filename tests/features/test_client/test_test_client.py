"""TestSqlaBroker: handlers run in memory (no database), or on a real one with with_real."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from faststream_sqla import SqlaBroker, SqlaMessage, SqlaRouter, TestSqlaBroker
from faststream_sqla.exceptions import (
    InvalidOptionError,
    InvalidQueueNameError,
    MessageSerializationError,
)


class Order(BaseModel):
    id: int
    item: str


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    return tmp_path / "never-created.db"


@pytest.fixture
def broker(db_file: Path) -> SqlaBroker:
    return SqlaBroker(f"sqlite+aiosqlite:///{db_file}")


@pytest.fixture(autouse=True)
def _no_database(db_file: Path):
    yield
    assert not db_file.exists(), "TestSqlaBroker touched the database"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param("hello", "hello", id="str"),
        pytest.param({"a": [1, 2]}, {"a": [1, 2]}, id="dict"),
        pytest.param(Order(id=1, item="x"), {"id": 1, "item": "x"}, id="pydantic"),
    ],
)
async def test_handler_mock_receives_body(broker: SqlaBroker, body, expected) -> None:
    @broker.subscriber("in")
    async def handler(msg) -> None: ...

    async with TestSqlaBroker(broker) as br:
        msg_id = await br.publish(body, queue="in")
        assert isinstance(msg_id, int)
        handler.mock.assert_called_once_with(expected)


async def test_pydantic_handler_gets_model(broker: SqlaBroker) -> None:
    got: list[Order] = []

    @broker.subscriber("orders")
    async def handler(order: Order) -> None:
        got.append(order)

    async with TestSqlaBroker(broker) as br:
        await br.publish(Order(id=7, item="w"), queue="orders")
    assert got == [Order(id=7, item="w")]


async def test_publisher_mock_gets_return_value(broker: SqlaBroker) -> None:
    out = broker.publisher("out")

    @broker.subscriber("in")
    @out
    async def handler(body: dict) -> dict:
        return {"doubled": body["n"] * 2}

    async with TestSqlaBroker(broker) as br:
        await br.publish({"n": 21}, queue="in")
        handler.mock.assert_called_once_with({"n": 21})
        out.mock.assert_called_once_with({"doubled": 42})


async def test_sqla_message_is_injected(broker: SqlaBroker) -> None:
    seen: dict = {}

    @broker.subscriber("in")
    async def handler(body: str, msg: SqlaMessage) -> None:
        seen.update(
            queue=msg.queue,
            headers=dict(msg.headers),
            correlation_id=msg.correlation_id,
            message_id=msg.message_id,
        )

    async with TestSqlaBroker(broker) as br:
        msg_id = await br.publish("x", queue="in", headers={"k": "v"}, correlation_id="cid-1")
    assert seen["queue"] == "in"
    assert seen["headers"]["k"] == "v"
    assert seen["correlation_id"] == "cid-1"
    assert seen["message_id"] == msg_id


async def test_publish_batch_calls_handler_per_message(broker: SqlaBroker) -> None:
    @broker.subscriber("in")
    async def handler(body: dict) -> None: ...

    async with TestSqlaBroker(broker) as br:
        ids = await br.publish_batch({"i": 1}, {"i": 2}, {"i": 3}, queue="in")
        assert [c.args[0] for c in handler.mock.call_args_list] == [{"i": 1}, {"i": 2}, {"i": 3}]
    assert len(ids) == 3
    assert all(isinstance(i, int) for i in ids)
    assert len(set(ids)) == 3
    assert ids == sorted(ids)


async def test_router_prefix(broker: SqlaBroker) -> None:
    router = SqlaRouter(prefix="svc.")
    done = router.publisher("done")

    @router.subscriber("orders")
    @done
    async def handle(body: str, msg: SqlaMessage) -> str:
        assert msg.queue == "svc.orders"
        return body.upper()

    @broker.subscriber("svc.done")
    async def downstream(body: str) -> None: ...

    @broker.subscriber("orders")
    async def unprefixed(body: str) -> None: ...

    broker.include_router(router)
    assert done.queue == "svc.done"

    async with TestSqlaBroker(broker) as br:
        await br.publish("abc", queue="svc.orders")
        handle.mock.assert_called_once_with("abc")
        done.mock.assert_called_once_with("ABC")
        downstream.mock.assert_called_once_with("ABC")
        unprefixed.mock.assert_not_called()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"queue": ""}, InvalidQueueNameError, id="empty-queue"),
        pytest.param({"queue": "q" * 256}, InvalidQueueNameError, id="long-queue"),
        pytest.param(
            {"queue": "in", "next_attempt_at": datetime(2030, 1, 1)},  # noqa: DTZ001
            InvalidOptionError,
            id="naive-datetime",
        ),
        pytest.param(
            {"queue": "in", "message": object()}, MessageSerializationError, id="object-body"
        ),
        pytest.param(
            {"queue": "in", "headers": {"x": object()}}, MessageSerializationError, id="headers"
        ),
        pytest.param(
            {"queue": "in", "delay": timedelta(seconds=-1)}, InvalidOptionError, id="neg-delay"
        ),
    ],
)
async def test_bad_input_raises_typed_errors(broker: SqlaBroker, kwargs, error) -> None:
    @broker.subscriber("in")
    async def handler(body) -> None: ...

    kwargs = {"message": "body", **kwargs}
    async with TestSqlaBroker(broker) as br:
        with pytest.raises(error):
            await br.publish(**kwargs)
        handler.mock.assert_not_called()


async def test_queue_name_limit_is_inclusive(broker: SqlaBroker) -> None:
    name = "q" * 255

    @broker.subscriber(name)
    async def handler(body: str) -> None: ...

    async with TestSqlaBroker(broker) as br:
        await br.publish("ok", queue=name)
        handler.mock.assert_called_once_with("ok")


async def test_with_real_database(database_url: str) -> None:
    broker = SqlaBroker(database_url)
    done: asyncio.Future[SqlaMessage] = asyncio.get_running_loop().create_future()

    @broker.subscriber("real", max_fetch_interval=0.1)
    async def handler(body: dict, msg: SqlaMessage) -> None:
        if not done.done():
            done.set_result(msg)

    async with TestSqlaBroker(broker, with_real=True) as br:
        msg_id = await br.publish({"n": 1}, queue="real", correlation_id="real-1")
        msg = await asyncio.wait_for(done, timeout=30)
        handler.mock.assert_called_once_with({"n": 1})
    assert msg.message_id == msg_id
    assert msg.correlation_id == "real-1"
    assert msg.queue == "real"
    assert msg.deliveries_count == 1


async def test_subscriber_middlewares_wrap_only_that_subscriber() -> None:
    from faststream import BaseMiddleware

    seen: list[str] = []

    class Tag(BaseMiddleware):
        async def consume_scope(self, call_next, msg):
            seen.append(f"tag:{msg.raw_message.queue}")
            return await call_next(msg)

    broker = SqlaBroker("sqlite+aiosqlite:///never-created.db")

    @broker.subscriber("tagged", middlewares=(Tag,))
    async def tagged(body: str) -> None:
        seen.append(f"handler:{body}")

    @broker.subscriber("plain")
    async def plain(body: str) -> None:
        seen.append(f"handler:{body}")

    async with TestSqlaBroker(broker) as br:
        await br.publish("a", queue="tagged")
        await br.publish("b", queue="plain")
    assert seen == ["tag:tagged", "handler:a", "handler:b"]


# -- as FastStream's other test clients -----------------------------------------------------
async def test_a_subscriber_started_while_the_client_runs_gets_messages(broker) -> None:
    async with TestSqlaBroker(broker, connect_only=False) as br:
        late = br.subscriber("late")
        got: list[str] = []

        async def handle(body: str) -> None:
            got.append(body)

        late(handle)
        await late.start()
        await br.publish("first", queue="late")
        assert got == ["first"]
        late.calls[0].handler.mock.assert_called_once_with("first")

        later = br.subscriber("later")
        later(handle)
        async with later:
            await br.publish("second", queue="later")
        assert got == ["first", "second"]


async def test_request_is_refused_as_the_real_broker_refuses_it(broker) -> None:
    from faststream.exceptions import FeatureNotSupportedException

    @broker.subscriber("q")
    async def handle(body: str) -> str:
        return body

    async with TestSqlaBroker(broker) as br:
        with pytest.raises(FeatureNotSupportedException, match="reply_to"):
            await br.request("x", queue="q")
        with pytest.raises(FeatureNotSupportedException, match="reply_to"):
            await br.publisher("q").request("x")


async def test_the_client_uses_the_brokers_id_generator(db_file) -> None:
    broker = SqlaBroker(f"sqlite+aiosqlite:///{db_file}", id_generator=lambda: "made-here")
    seen: list[str | None] = []

    @broker.subscriber("q")
    async def handle(body: str, msg: SqlaMessage) -> None:
        seen.append(msg.correlation_id)

    async with TestSqlaBroker(broker) as br:
        await br.publish("x", queue="q")
        await br.publish_batch("y", "z", queue="q")
    assert seen == ["made-here", "made-here-0", "made-here-1"]


async def test_a_batch_given_as_one_list_is_refused_in_memory(broker) -> None:
    @broker.subscriber("q")
    async def handle(body: str) -> None: ...

    async with TestSqlaBroker(broker) as br:
        with pytest.raises(InvalidOptionError, match=r"publish_batch\(\*items"):
            await br.publish_batch(["a", "b"], queue="q")
        handle.mock.assert_not_called()
