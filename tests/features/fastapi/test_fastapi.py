"""FastAPI: SqlaRouter's lifespan and dependencies, and the outbox example end to end
with FastAPI's TestClient, on every database."""

import json
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from examples.fastapi_outbox import Order, create_app
from faststream_sqla import SqlaBroker as Broker
from faststream_sqla.fastapi import SqlaBroker, SqlaMessage, SqlaRouter

from tests.support.helpers import FAST, Recorder, wait_until


async def queue_bodies(engine, tables, queue: str) -> list[bytes]:
    """The payloads of `queue`'s messages, waiting or archived."""
    async with engine.connect() as conn:
        bodies = []
        for table in (tables.message, tables.archive):
            result = await conn.execute(sa.select(table.c.payload).where(table.c.queue == queue))
            bodies += [bytes(p) for p in result.scalars()]
        return bodies


async def test_outbox_example_commits_the_message_with_the_row(database_url, engine, tables):
    app = create_app(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(Order.metadata.drop_all)
    with TestClient(app) as client:
        placed = client.post("/orders", json={"item": "book", "quantity": 2})
        assert placed.status_code == 201, placed.text
        order_id = placed.json()["id"]

        # refused after its message was published: the rollback takes both
        refused = client.post("/orders", json={"item": "piano", "quantity": 500})
        assert refused.status_code == 409

        async def confirmed() -> bool:
            return client.get(f"/orders/{order_id}").json()["status"] == "confirmed"

        await wait_until(confirmed)

    async with engine.connect() as conn:
        orders = (await conn.execute(sa.select(Order.__table__))).mappings().all()
    assert [(o["id"], o["item"]) for o in orders] == [(order_id, "book")]
    bodies = [json.loads(b) for b in await queue_bodies(engine, tables, "order-placed")]
    assert bodies == [{"order_id": order_id, "item": "book"}]
    async with engine.begin() as conn:
        await conn.run_sync(Order.metadata.drop_all)


async def test_router_injects_the_broker_and_runs_handlers_with_the_app(database_url):
    router = SqlaRouter(database_url)
    got = Recorder()

    def http_dependency() -> str:
        return "from FastAPI's Depends"

    # handlers get FastStream's context (SqlaBroker, SqlaMessage) and FastAPI's Depends
    @router.subscriber("greetings", **FAST)
    async def greet(
        name: str, msg: SqlaMessage, broker: SqlaBroker,
        extra: Annotated[str, Depends(http_dependency)],
    ) -> None:
        got.record((name, msg.queue, broker is router.broker, extra))

    # endpoints get the broker as a FastAPI dependency
    @router.post("/greet/{name}")
    async def send(
        name: str, broker: Annotated[Broker, Depends(lambda: router.broker)]
    ) -> dict[str, int]:
        return {"id": await broker.publish(name, queue="greetings")}

    app = FastAPI()
    app.include_router(router)
    with TestClient(app) as client:
        assert router.broker.running
        response = client.post("/greet/ada")
        assert response.status_code == 200
        assert isinstance(response.json()["id"], int)

        async def handled() -> bool:
            return bool(got.calls)

        await wait_until(handled)
        assert client.get("/asyncapi.json").json()["channels"]
    assert got.calls == [("ada", "greetings", True, "from FastAPI's Depends")]
    assert not router.broker.running
