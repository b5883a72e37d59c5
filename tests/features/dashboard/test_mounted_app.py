"""The dashboard mounted in another FastAPI app, on every database: it serves its pages
and API under the mount point whether or not its own start-up ran, and the parent's
lifespan, entering the dashboard's, disposes of the engine the dashboard made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from faststream_sqla import SqlaBroker
from faststream_sqla.dashboard import create_app

from .conftest import ok


async def _publish(database_url: str) -> None:
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("a", queue="q")


async def test_the_parents_lifespan_disposes_of_the_engine_the_mounted_dashboard_made(
    database_url,
):
    await _publish(database_url)
    dashboard = create_app(database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with dashboard.router.lifespan_context(dashboard):
            yield

    parent = FastAPI(lifespan=lifespan)
    parent.mount("/queues", dashboard)
    engine = dashboard.state.dashboard.admin.engine

    async with parent.router.lifespan_context(parent):
        transport = httpx.ASGITransport(app=parent)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            (queue,) = ok(await http.get("/queues/api/queues"))["queues"]
            assert queue["queue"] == "q"
            page = await http.get("/queues/")
            assert page.status_code == 200 and 'href="/queues/queues/q"' in page.text
        pool = engine.pool
        assert pool.checkedin() > 0  # the dashboard's connections, idle in its pool

    assert pool.checkedin() == 0 and engine.pool is not pool  # disposed: a fresh pool


async def test_a_mounted_dashboard_serves_without_its_start_up_having_run(database_url, engine):
    await _publish(database_url)
    parent = FastAPI()
    parent.mount("/queues", create_app(engine))
    transport = httpx.ASGITransport(app=parent)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        assert ok(await http.get("/queues/api/queues"))["queues"][0]["queue"] == "q"
        assert (await http.get("/queues/")).status_code == 200
