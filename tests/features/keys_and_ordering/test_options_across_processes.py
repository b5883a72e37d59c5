"""Message options hold across real processes: ordering and idempotency keys,
priorities, expiry and backpressure."""

from __future__ import annotations

import sys
from collections import defaultdict

import pytest
import sqlalchemy as sa

from faststream_sqla import Envelope, MessageState, QueueFullError, SqlaBroker

from tests.support.helpers import rows
from tests.support.processes import WORKERS, exit_code, read_line, run_until, started_together

pytestmark = pytest.mark.slow

handled = sa.Table(
    "handled_keyed",
    sa.MetaData(),
    sa.Column("key", sa.String(20)),
    sa.Column("seq", sa.Integer),
    sa.Column("pid", sa.Integer),
    sa.Column("started_ns", sa.BigInteger),
    sa.Column("finished_ns", sa.BigInteger),
)


async def test_ordering_keys_hold_across_three_processes(database_url, engine, tables, tmp_path):
    keys, per_key, processes = 50, 40, 3
    async with engine.begin() as conn:
        await conn.run_sync(handled.metadata.drop_all)
        await conn.run_sync(handled.metadata.create_all)
    try:
        async with SqlaBroker(database_url) as broker:
            # Keys interleaved, as traffic about many entities arrives.
            items = [
                Envelope({"key": f"k{k}", "seq": seq}, ordering_key=f"k{k}")
                for seq in range(per_key)
                for k in range(keys)
            ]
            for start in range(0, len(items), 500):
                await broker.publish_batch(*items[start : start + 500], queue="keyed")

        logs = [tmp_path / f"keyed-{i}.log" for i in range(processes)]
        argv = (sys.executable, WORKERS / "keyed.py", database_url)
        async with started_together([argv] * processes, logs) as procs:

            async def all_handled() -> bool:
                async with engine.connect() as conn:
                    count = sa.select(sa.func.count()).select_from(handled)
                    return await conn.scalar(count) >= keys * per_key

            await run_until(procs, logs, all_handled, timeout=120)

        async with engine.connect() as conn:
            result = await conn.execute(
                sa.select(handled).order_by(handled.c.started_ns, handled.c.seq)
            )
            runs = result.all()
        by_key = defaultdict(list)
        for run in runs:
            by_key[run.key].append(run)
        assert len(runs) == keys * per_key, "a message was handled twice"
        for key, key_runs in by_key.items():
            assert [r.seq for r in key_runs] == list(range(per_key)), f"{key} out of order"
            for before, after in zip(key_runs, key_runs[1:]):
                assert after.started_ns >= before.finished_ns, f"{key}: two at once"
        assert len({r.pid for r in runs}) == processes, "a process handled nothing"
        assert await rows(engine, tables.message) == []
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(handled.metadata.drop_all)


PUBLISH_ONE_KEY = """
import asyncio, sys
from faststream_sqla import SqlaBroker

async def main() -> None:
    async with SqlaBroker(sys.argv[1], logger=None) as broker:
        print("READY", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        ids = await asyncio.gather(*(
            broker.publish("once", queue="q", idempotency_key="race") for _ in range(7)
        ))
        print(" ".join(map(str, ids)), flush=True)

asyncio.run(main())
"""


async def test_publishers_in_three_processes_race_on_one_key(
    database_url, engine, tables, tmp_path
):
    logs = [tmp_path / f"publisher-{i}.log" for i in range(3)]
    argv = (sys.executable, "-c", PUBLISH_ONE_KEY, database_url)
    # released together: 21 publishes of one key at once
    async with started_together([argv] * 3, logs) as procs:
        returned = [await read_line(proc, log) for proc, log in zip(procs, logs)]
        for proc, log in zip(procs, logs):
            assert await exit_code(proc) == 0, log.read_text()
    (row,) = await rows(engine, tables.message)
    assert {int(i) for line in returned for i in line.split()} == {row["id"]}


recorded = sa.Table(
    "handled_any",
    sa.MetaData(),
    sa.Column("body", sa.String(50)),
    sa.Column("priority", sa.Integer),
    sa.Column("pid", sa.Integer),
    sa.Column("started_ns", sa.BigInteger),
    sa.Column("claim", sa.Float),
)


async def consume_in_processes(database_url, engine, tmp_path, queue, until) -> list:
    """Run three recorder.py workers (4 workers each) on `queue` until `until()` holds;
    the rows they recorded, in start order."""
    async with engine.begin() as conn:
        await conn.run_sync(recorded.metadata.drop_all)
        await conn.run_sync(recorded.metadata.create_all)
    logs = [tmp_path / f"recorder-{i}.log" for i in range(3)]
    argv = (sys.executable, WORKERS / "recorder.py", database_url, queue)
    async with started_together([argv] * 3, logs) as procs:
        await run_until(procs, logs, until, timeout=120)
    async with engine.connect() as conn:
        runs = (await conn.execute(sa.select(recorded).order_by(recorded.c.started_ns))).all()
    async with engine.begin() as conn:
        await conn.run_sync(recorded.metadata.drop_all)
    return runs


async def archived_count(engine, tables) -> int:
    async with engine.connect() as conn:
        return await conn.scalar(sa.select(sa.func.count()).select_from(tables.archive))


async def test_each_process_takes_higher_priorities_first(database_url, engine, tables, tmp_path):
    levels = (0, 5, 10)
    async with SqlaBroker(database_url) as broker:
        # lowest first, so that id order alone would give the opposite answer
        for level in levels:
            await broker.publish_batch(
                *(Envelope(f"p{level}-{i}", priority=level) for i in range(100)), queue="prio"
            )

    async def drained() -> bool:
        return await archived_count(engine, tables) == 300

    runs = await consume_in_processes(database_url, engine, tmp_path, "prio", drained)
    assert len(runs) == 300
    # Every claim takes the highest priorities waiting: in each process, a later claim
    # holds nothing above the lowest priority of an earlier one. (Handler start times
    # would not do: a worker may start after one that took a later message.)
    for pid in {r.pid for r in runs}:
        claims: dict[float, list[int]] = defaultdict(list)
        for r in runs:
            if r.pid == pid:
                claims[r.claim].append(r.priority)
        in_order = [claims[c] for c in sorted(claims)]
        for earlier, later in zip(in_order, in_order[1:]):
            assert max(later) <= min(earlier), f"process {pid} claimed {in_order}"


async def test_expired_messages_never_reach_a_handler_in_any_process(
    database_url, engine, tables, tmp_path
):
    async with SqlaBroker(database_url) as broker:
        await broker.publish_batch(
            *(Envelope(f"gone-{i}", ttl=0) if i % 2 else f"kept-{i}" for i in range(200)),
            queue="ttl",
        )

    async def drained() -> bool:
        return await archived_count(engine, tables) == 200

    runs = await consume_in_processes(database_url, engine, tmp_path, "ttl", drained)
    assert sorted(r.body for r in runs) == sorted(f"kept-{i}" for i in range(0, 200, 2))
    states = [r["state"] for r in await rows(engine, tables.archive)]
    assert states.count(MessageState.EXPIRED) == 100
    assert states.count(MessageState.COMPLETED) == 100


async def test_backpressure_refuses_at_the_limit_and_accepts_after_a_drain(
    database_url, engine, tables, tmp_path
):
    async with SqlaBroker(database_url, max_queue_size=150) as broker:
        await broker.publish_batch(*(f"m-{i}" for i in range(150)), queue="bp")
        with pytest.raises(QueueFullError):
            await broker.publish("one too many", queue="bp")

        async def drained() -> bool:
            return await archived_count(engine, tables) == 150

        runs = await consume_in_processes(database_url, engine, tmp_path, "bp", drained)
        assert len(runs) == 150
        await broker.publish_batch(*(f"again-{i}" for i in range(150)), queue="bp")
    assert len(await rows(engine, tables.message)) == 150
