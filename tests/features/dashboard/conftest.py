"""The dashboard's API on the test's database, through an in-process HTTP client (the
real app, its routes, auth and error handlers; httpx's ASGI transport)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla import MessageState
from faststream_sqla.clock import utc_now
from faststream_sqla.dashboard import create_app
from faststream_sqla.lifecycle import settled_unhandled
from faststream_sqla.schema import WHOLE_QUEUE, BreakerState

Client = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def dashboard(engine: AsyncEngine) -> Client:
    """`async with dashboard(read_only=..., auth=...) as http:` a client of a dashboard
    app on the test's database."""

    @asynccontextmanager
    async def client(**options: Any) -> AsyncIterator[httpx.AsyncClient]:
        app = create_app(engine, **options)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
                yield http

    return client


@pytest.fixture
async def api(dashboard: Client) -> AsyncIterator[httpx.AsyncClient]:
    async with dashboard() as http:
        yield http


async def fail(driver, engine, queue: str, n: int, error: str = "ValueError: bad data") -> list[int]:
    """Claim `n` messages of `queue` and archive them FAILED with `error`."""
    claimed = await driver.claim(engine, queue, n)
    outcomes = [settled_unhandled(m, MessageState.FAILED, error) for m in claimed]
    assert await driver.write_outcomes(engine, outcomes) == n
    return [m.id for m in claimed]


async def open_breaker(engine: AsyncEngine, tables: Any, queue: str) -> None:
    """`queue`'s circuit breaker open, after 3 failures, for another minute."""
    async with engine.begin() as conn:
        await conn.execute(
            tables.controls.insert().values(
                queue=queue,
                channel=WHOLE_QUEUE,
                updated_at=utc_now(),
                breaker_state=BreakerState.OPEN.value,
                breaker_failures=3,
                breaker_changed_at=utc_now(),
                breaker_reopens_at=utc_now(60),
            )
        )


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()
