"""Real processes on every database: crash recovery, sharing a queue, the example app."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from tests.support.helpers import (
    FAST,
    Recorder,
    holds_a_transaction,
    open_transactions,
    recording,
    rows,
    wait_until,
)
from tests.support.processes import (
    WORKERS,
    exit_code,
    read_line,
    run_until,
    spawn,
    started_together,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]


async def publish(database_url: str, queue: str, *bodies: object, chunk: int = 500) -> list[int]:
    """Publish from a broker of its own, as another service would."""
    ids: list[int] = []
    async with SqlaBroker(database_url) as broker:
        for start in range(0, len(bodies), chunk):
            ids += await broker.publish_batch(*bodies[start : start + chunk], queue=queue)
    return ids


async def test_sigkilled_worker_message_is_delivered_again(
    database_url, make_broker, engine, tables, tmp_path
):
    log = tmp_path / "stuck.log"
    (message_id,) = await publish(database_url, "jobs", "job")
    async with spawn(sys.executable, WORKERS / "stuck.py", database_url, log=log) as proc:
        assert await read_line(proc, log) == f"STARTED {message_id} 1"
        proc.send_signal(signal.SIGKILL)
        assert await exit_code(proc) == -signal.SIGKILL

    # The crash left the claim behind: only release-stuck can bring the message back.
    (row,) = await rows(engine, tables.message)
    assert (row["id"], row["state"], row["deliveries_count"]) == (
        message_id, MessageState.PROCESSING, 1
    )

    broker = make_broker()
    got = recording(
        broker, "jobs", release_stuck_timeout=0.5, release_stuck_interval=0.1,
        record=lambda body, msg: (msg.message_id, msg.deliveries_count, msg.attempts_count),
    )

    async with broker:
        await broker.start()
        assert await got.wait_for(1) == [(message_id, 2, 0)]

    # Leaving the block stopped the broker, which flushed the outcome.
    (done,) = await rows(engine, tables.archive)
    assert (done["id"], done["state"], done["deliveries_count"]) == (
        message_id, MessageState.COMPLETED, 2
    )
    assert await rows(engine, tables.message) == []


async def _stop_between_statements(proc, engine, dialect_name: str, database_url: str) -> None:
    """SIGSTOP `proc` at a moment it holds no transaction open (resuming and stopping it
    again until so)."""

    async def between_statements() -> bool:
        return not await holds_a_transaction(engine, dialect_name, database_url, pid=proc.pid)

    async def stopped_quietly() -> bool:
        # Running, it finishes what it began (on a busy host stopping it again at once
        # could catch it in the same transaction every time); then it is stopped, and
        # checked again, since it may have begun another in between.
        await wait_until(between_statements)
        proc.send_signal(signal.SIGSTOP)
        if await between_statements():
            return True
        proc.send_signal(signal.SIGCONT)
        return False

    try:
        await wait_until(stopped_quietly)
    except TimeoutError:
        proc.send_signal(signal.SIGCONT)
        raise TimeoutError(
            f"worker {proc.pid} never stood between statements; open transactions: "
            f"{await open_transactions(engine, dialect_name)}"
        ) from None


async def test_worker_stopped_past_its_lease_loses_the_message_and_carries_on(
    database_url, engine, tables, dialect_name, tmp_path
):
    log = tmp_path / "stale.log"
    (slow,) = await publish(database_url, "jobs", "slow")
    async with spawn(
        sys.executable, WORKERS / "stale.py", database_url, log=log,
        stdin=asyncio.subprocess.PIPE,
    ) as stale:
        assert await read_line(stale, log) == f"STARTED {slow} 1"
        await _stop_between_statements(stale, engine, dialect_name, database_url)
        try:
            # Frozen mid-handler: its lease lapses, another process takes the message.
            broker = SqlaBroker(database_url)
            got = Recorder()

            @broker.subscriber(
                "jobs", release_stuck_timeout=1.5, release_stuck_interval=0.1, **FAST
            )
            async def handle(body: str, msg: SqlaMessage) -> None:
                got.record((msg.message_id, msg.deliveries_count))

            async with broker:
                await broker.start()
                assert await got.wait_for(1) == [(slow, 2)]
        finally:
            stale.send_signal(signal.SIGCONT)

        (done,) = await rows(engine, tables.archive)
        assert (done["id"], done["state"], done["deliveries_count"]) == (
            slow, MessageState.COMPLETED, 2
        )

        # Resumed, the stale worker finishes its handler; its outcome is fenced out.
        assert stale.stdin is not None
        stale.stdin.write(b"go\n")
        await stale.stdin.drain()
        assert await read_line(stale, log) == f"HANDLED {slow}"

        async def warned() -> bool:
            return "outcomes were stale" in log.read_text()

        await wait_until(warned)

        # ... and it carries on serving the queue.
        (fresh,) = await publish(database_url, "jobs", "fresh")
        assert await read_line(stale, log) == f"STARTED {fresh} 1"
        assert await read_line(stale, log) == f"HANDLED {fresh}"

        async def both_archived() -> bool:
            return len(await rows(engine, tables.archive)) == 2

        await wait_until(both_archived)

    archive = {row["id"]: row for row in await rows(engine, tables.archive)}
    assert sorted(archive) == [slow, fresh]
    assert (archive[slow]["state"], archive[slow]["deliveries_count"]) == (
        MessageState.COMPLETED, 2
    )
    assert archive[fresh]["state"] == MessageState.COMPLETED
    assert await rows(engine, tables.message) == []


async def test_three_processes_share_a_queue_exactly_once(database_url, engine, tables, tmp_path):
    n, workers = 2000, 3
    # No unique key: a second handling must show up as a row, not fail the handler.
    handled = sa.Table(
        "handled", sa.MetaData(), sa.Column("value", sa.Integer), sa.Column("pid", sa.Integer)
    )
    async with engine.begin() as conn:
        await conn.run_sync(handled.metadata.drop_all)
        await conn.run_sync(handled.metadata.create_all)
    try:
        await publish(database_url, "shared", *range(n))

        logs = [tmp_path / f"sharer-{i}.log" for i in range(workers)]
        argv = (sys.executable, WORKERS / "sharer.py", database_url)
        async with started_together([argv] * workers, logs) as procs:

            async def all_archived() -> bool:
                async with engine.connect() as conn:
                    count = sa.select(sa.func.count()).select_from(tables.archive)
                    return await conn.scalar(count) == n

            await run_until(procs, logs, all_archived)

        async with engine.connect() as conn:
            result = await conn.execute(sa.select(handled.c.value, handled.c.pid))
            pairs = result.all()
        counts = Counter(value for value, _ in pairs)
        assert [v for v, c in counts.items() if c > 1] == [], "handled more than once"
        assert set(range(n)) - set(counts) == set(), "never handled"
        assert len(pairs) == n
        assert {pid for _, pid in pairs} == {p.pid for p in procs}, "a worker handled nothing"
        archive = await rows(engine, tables.archive)
        assert [r["state"] for r in archive] == [MessageState.COMPLETED] * n
        assert await rows(engine, tables.message) == []
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(handled.metadata.drop_all)


async def test_example_app_runs_under_faststream_run(database_url, engine, tables, tmp_path):
    log = tmp_path / "app.log"
    faststream = Path(sys.executable).parent / "faststream"
    env = {**os.environ, "DATABASE_URL": database_url}
    async with spawn(
        faststream, "run", "examples.app:app", log=log, pipe=False, cwd=REPO, env=env
    ) as proc:

        def all_completed(orders: int) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                archive = await rows(engine, tables.archive)
                done = [r["queue"] for r in archive if r["state"] == MessageState.COMPLETED]
                return sorted(done) == ["orders"] * orders + ["shipments"] * orders

            return check

        try:
            await wait_until(all_completed(3), timeout=60)
            # the README's second step: a message from another terminal
            sent = await asyncio.create_subprocess_exec(
                Path(sys.executable).parent / "faststream-sqla", "publish", "orders",
                '{"id": 4, "item": "gadget", "quantity": 2}', "--url", database_url,
                stdout=asyncio.subprocess.PIPE,
            )
            assert (await sent.communicate())[0].decode().startswith("Published message ")
            await wait_until(all_completed(4), timeout=60)
        except TimeoutError:
            pytest.fail(f"example did not complete its orders:\n{log.read_text()}")
        proc.send_signal(signal.SIGTERM)
        assert await exit_code(proc) == 0, log.read_text()
    output = log.read_text()
    assert "published orders [" in output  # the app's own log line shows
    assert "order 4: 2 x gadget (delivery 1)" in output
    assert "shipment for order 4: shipped" in output


async def test_message_options_example_runs_under_faststream_run(
    database_url, engine, tables, tmp_path
):
    log = tmp_path / "message_options.log"
    faststream = Path(sys.executable).parent / "faststream"
    env = {**os.environ, "DATABASE_URL": database_url}
    async with spawn(
        faststream, "run", "examples.message_options:app", log=log, pipe=False, cwd=REPO,
        env=env,
    ) as proc:

        async def all_archived() -> bool:
            return len(await rows(engine, tables.archive)) == 20

        try:
            await wait_until(all_archived, timeout=60)
        except TimeoutError:
            pytest.fail(f"example did not handle its messages:\n{log.read_text()}")
        proc.send_signal(signal.SIGTERM)
        assert await exit_code(proc) == 0, log.read_text()

    archive = await rows(engine, tables.archive)  # by id: publish order
    assert await rows(engine, tables.message) == []
    assert {r["state"] for r in archive} == {MessageState.COMPLETED}
    assert Counter(r["queue"] for r in archive) == {
        "notifications": 3, "order-events": 5, "payments": 2, "handled": 10
    }
    # three publishes of payment 42 (two plain, one in a batch) made one message
    assert [r["idempotency_key"] for r in archive if r["queue"] == "payments"] == [
        "payment-42", "payment-43"
    ]
    # each handler published one line to "handled", so those ids give the handling order
    handled = [bytes(r["payload"]).decode() for r in archive if r["queue"] == "handled"]
    assert [h for h in handled if h.startswith("notification")] == [
        "notification, priority 10: disk full",
        "notification, priority 5: new sign-in",
        "notification, priority 0: weekly digest",
    ]
    assert [h for h in handled if h.startswith("order-1")] == [
        "order-1: created", "order-1: paid", "order-1: shipped"
    ]
    assert [h for h in handled if h.startswith("order-2")] == ["order-2: created", "order-2: paid"]
