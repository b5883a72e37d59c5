"""The engines we make from a URL hand out the connection checked in last, whose
prepared statements are warm, and statements whose text depends on a row count come
in a few power-of-two sizes, so each stays prepared."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.connecting import create_engine
from faststream_sqla.drivers.sqlite.driver import chunks


async def driver_connection(conn: AsyncConnection) -> object:
    return (await conn.get_raw_connection()).driver_connection


async def handed_out_after_two_check_ins(engine: AsyncEngine) -> tuple[object, object, object]:
    """(first checked in, last checked in, the next one handed out)."""
    async with engine.connect() as early, engine.connect() as late:
        first_in, last_in = await driver_connection(late), await driver_connection(early)
    async with engine.connect() as conn:
        return first_in, last_in, await driver_connection(conn)


async def test_the_connection_checked_in_last_is_handed_out_next(database_url):
    engine = create_engine(database_url)
    try:
        first_in, last_in, next_out = await handed_out_after_two_check_ins(engine)
    finally:
        await engine.dispose()
    assert first_in is not last_in
    assert next_out is last_in


async def test_a_pool_order_the_user_asks_for_is_kept(database_url):
    engine = create_engine(database_url, pool_use_lifo=False)
    try:
        first_in, _last_in, next_out = await handed_out_after_two_check_ins(engine)
    finally:
        await engine.dispose()
    assert next_out is first_in


async def test_an_in_memory_sqlite_engine_keeps_its_single_connection():
    engine = create_engine("sqlite+aiosqlite://")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        async with engine.connect() as conn:
            # the same connection, so the same in-memory database
            assert (await conn.exec_driver_sql("SELECT count(*) FROM t")).scalar() == 0
    finally:
        await engine.dispose()


@given(rows=st.integers(0, 20_000), most=st.integers(1, 5000))
def test_chunks_cover_every_row_once_in_power_of_two_sizes_largest_first(rows, most):
    found = chunks(rows, most)
    sizes = [size for _start, size in found]
    assert sum(sizes) == rows
    # one after the other, from the first row
    ends = [0] + [start + size for start, size in found]
    assert [start for start, _size in found] == ends[:-1]
    assert all(size & (size - 1) == 0 and 0 < size <= most for size in sizes)
    assert sizes == sorted(sizes, reverse=True)
    # below the largest size, each size at most once: a few texts in all
    largest = max(sizes, default=0)
    smaller = [size for size in sizes if size < largest]
    assert len(smaller) == len(set(smaller))
