"""Small tools the integration tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.schema import QueueTables

FAST = {
    "min_fetch_interval": 0.0,
    "max_fetch_interval": 0.05,
    "flush_interval": 0.01,
}


class Recorder:
    """Collects handler calls and lets a test await the n-th one (no sleeping)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def record(self, item: Any) -> None:
        self.calls.append(item)
        for n, fut in self._waiters:
            if len(self.calls) >= n and not fut.done():
                fut.set_result(None)

    async def wait_for(self, n: int, timeout: float = 30.0) -> list[Any]:
        if len(self.calls) < n:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((n, fut))
            await asyncio.wait_for(fut, timeout)
        return self.calls


async def rows(engine: AsyncEngine, table: sa.Table, *where: Any) -> list[sa.RowMapping]:
    async with engine.connect() as conn:
        result = await conn.execute(sa.select(table).where(*where).order_by(table.c.id))
        return list(result.mappings())


async def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.02
) -> None:
    """Poll the database for a state no event announces (another process's writes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def archived(engine: AsyncEngine, tables: QueueTables) -> list[sa.RowMapping]:
    return await rows(engine, tables.archive)
