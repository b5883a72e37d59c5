"""Client CPU of one PostgreSQL statement, by the way it is sent:
``python -m benchmarks.statement_cost [N]``.

`SELECT 1` N times (default 2,000) through asyncpg alone, SQLAlchemy on one open
connection, SQLAlchemy with a checkout and autocommit per statement (how the broker's
one-statement operations ran before), and the pool's connection used through the driver
(how claims and outcome writes run now, `faststream_sqla/dialects/_asyncpg.py`). Process
CPU time, so the figures hold however busy the server is.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable

import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.dialects._asyncpg import driver_connection
from faststream_sqla.dialects.postgresql import autocommit

from .common import BENCH_DB, PG_SERVER, driver_params


async def cpu_per_call(n: int, call: Callable[[], Awaitable[object]]) -> float:
    await call()  # warm: prepared statements, a pooled connection
    start = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - start) / n * 1e6


async def main(n: int) -> None:
    url = f"{PG_SERVER}/{BENCH_DB}"
    engine = create_async_engine(url)
    one = sa.select(sa.literal(1))
    raw = await asyncpg.connect(**driver_params(url))
    try:
        prepared = await raw.prepare("SELECT 1")
        async with engine.connect() as held:

            async def on_held() -> object:
                return (await held.execute(one)).scalar()

            async def per_statement_autocommit() -> object:
                async with autocommit(engine) as conn:
                    return (await conn.execute(one)).scalar()

            async def pooled_driver() -> object:
                async with driver_connection(engine) as conn:
                    return await conn.fetchval("SELECT 1")

            rows = [
                ("asyncpg alone, prepared", await cpu_per_call(n, prepared.fetchval)),
                ("SQLAlchemy, one open connection", await cpu_per_call(n, on_held)),
                ("SQLAlchemy, checkout + autocommit each", await cpu_per_call(
                    n, per_statement_autocommit)),
                ("pool's connection through the driver", await cpu_per_call(n, pooled_driver)),
            ]
    finally:
        await raw.close()
        await engine.dispose()
    for label, us in rows:
        print(f"{label:42s} {us:7.0f} µs client CPU a statement")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
