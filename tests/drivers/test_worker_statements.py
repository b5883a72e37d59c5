"""The statements of drivers/workers.py on every database: a row written, refreshed,
inserted again by a refresh that finds it gone, pruned by its silence and deleted."""

from __future__ import annotations

from faststream_sqla.drivers import workers as store
from faststream_sqla.drivers.workers import WorkerIdentity, WorkerLoad

ME = WorkerIdentity("a" * 32, "host-1", 4242, "9.9.9")
OTHER = WorkerIdentity("b" * 32, "host-2", 77, "9.9.9")


def load(*holding: int, in_flight: int = 0) -> WorkerLoad:
    return WorkerLoad(["q", "r"], in_flight, list(holding), silent_after=1.5)


async def test_a_row_is_written_refreshed_and_deleted(engine, tables):
    table = tables.workers
    async with engine.begin() as conn:
        await store.register(conn, table, ME, load())
        await store.register(conn, table, OTHER, load())
    async with engine.connect() as conn:
        now, (first, _) = await store.load_all(conn, table)
    assert (first.worker_id, first.host, first.pid, first.version) == (
        ME.worker_id, ME.host, ME.pid, ME.version
    )
    assert (list(first.queues), list(first.holding), first.in_flight) == (["q", "r"], [], 0)
    assert first.started_at <= first.last_seen <= now

    async with engine.begin() as conn:
        assert await store.refresh(conn, table, ME, load(7, 9, in_flight=2))
    async with engine.connect() as conn:
        _, rows = await store.load_all(conn, table)
    mine = next(r for r in rows if r.worker_id == ME.worker_id)
    assert (list(mine.holding), mine.in_flight) == ([7, 9], 2)
    assert mine.started_at == first.started_at and mine.last_seen >= first.last_seen

    async with engine.begin() as conn:
        assert await store.forget(conn, table, ME.worker_id) == 1
        assert await store.forget(conn, table, ME.worker_id) == 0
        # the row is gone: a refresh inserts it again
        assert not await store.refresh(conn, table, ME, load(3))
    async with engine.connect() as conn:
        _, rows = await store.load_all(conn, table)
    assert sorted(r.worker_id for r in rows) == [ME.worker_id, OTHER.worker_id]


async def test_prune_deletes_only_rows_silent_for_longer(engine, tables):
    table = tables.workers
    async with engine.begin() as conn:
        await store.register(conn, table, ME, load())
        assert await store.prune(conn, table, 3600.0) == 0
        assert await store.prune(conn, table, -1.0) == 1  # silent "longer" than the future
    async with engine.connect() as conn:
        _, rows = await store.load_all(conn, table)
    assert rows == []
