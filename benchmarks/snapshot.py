"""A drain while another session holds a snapshot for the whole run (PostgreSQL).

A session idle in a transaction keeps every row version deleted after its snapshot:
no vacuum can remove the dead head of the claim index, so claims walk more of it as
the drain goes on. Three drains of the same backlog, in one run:

- plain: nothing holds a snapshot;
- held: a session idle in a REPEATABLE READ transaction throughout, broker vacuum on;
- held, vacuum off: the same with `vacuum_message_table=False`, which is as good as
  the broker's vacuum can hope to do when it can remove nothing.

Each held drain is reported as a ratio to the plain one, with the vacuums the broker
ran and skipped, and the table's dead tuples sampled once a second (from
pg_stat_user_tables, which lags the truth by up to the stats interval).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from .common import Results, Target
from .ours import SYSTEM, drain_once

SAMPLE_SECONDS = 1.0
DEAD_TUPLES_SQL = (
    "SELECT s.n_dead_tup, s.n_live_tup, c.reltuples FROM pg_stat_user_tables s "
    "JOIN pg_class c ON c.oid = s.relid WHERE s.relname = 'message'"
)


@contextlib.asynccontextmanager
async def held_snapshot(url: str) -> AsyncIterator[None]:
    """A session idle in a transaction whose snapshot stays open until the block ends.
    It reads no table, so it takes no lock that would hold back a TRUNCATE."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
            await conn.execute(sa.text("SELECT 1"))
            yield
            await conn.rollback()
    finally:
        await engine.dispose()


async def _sample_dead_tuples(url: str, samples: list[dict[str, float]]) -> None:
    engine = create_async_engine(url)
    try:
        while True:
            async with engine.connect() as conn:
                row = (await conn.execute(sa.text(DEAD_TUPLES_SQL))).first()
            if row is not None:
                samples.append({"dead": row[0], "live": row[1], "estimate": row[2]})
            await asyncio.sleep(SAMPLE_SECONDS)
    finally:
        await engine.dispose()


async def _drain(url: str, n: int, *, snapshot: bool, vacuum: bool) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    sampler = asyncio.create_task(_sample_dead_tuples(url, samples))
    try:
        async with held_snapshot(url) if snapshot else contextlib.nullcontext():
            drained = await drain_once(url, n, claims="100-1000", vacuum=vacuum)
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    drained["dead_tuples_max"] = max((s["dead"] for s in samples), default=None)
    drained["estimate_min"] = min((s["estimate"] for s in samples), default=None)
    drained["dead_tuples_series"] = [s["dead"] for s in samples]  # one a second
    return drained


async def run_long_snapshot(target: Target, n: int, results: Results) -> None:
    if target.database != "postgresql":
        return  # the other databases purge dead entries without a vacuum
    plain = await _drain(target.url, n, snapshot=False, vacuum=True)
    held = await _drain(target.url, n, snapshot=True, vacuum=True)
    held_off = await _drain(target.url, n, snapshot=True, vacuum=False)
    for name, run in (("plain", plain), ("held", held), ("held_vacuum_off", held_off)):
        if run["problem"]:
            results.error("snapshot", target.database, name, run["problem"])
        results.add(
            SYSTEM, "snapshot", f"{name}_drain_msg_per_s", target.database, run["msg_per_s"],
            "msg/s", n=n, vacuums=run["vacuums"], vacuums_skipped=run["vacuums_skipped"],
            dead_tuples_max=run["dead_tuples_max"], row_estimate_min=run["estimate_min"],
            dead_tuples_per_second=run["dead_tuples_series"],
        )
    results.add(SYSTEM, "snapshot", "held_over_plain", target.database,
                held["msg_per_s"] / plain["msg_per_s"], "x", n=n)
    results.add(SYSTEM, "snapshot", "held_vacuum_off_over_plain", target.database,
                held_off["msg_per_s"] / plain["msg_per_s"], "x", n=n)
