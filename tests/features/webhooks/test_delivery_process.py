"""`faststream-sqla webhooks run` as a process of its own, on every database: killed
with SIGKILL mid-delivery, it loses nothing (a new process delivers the rest, and the
receiver sees every webhook-id at least once); stopped with SIGTERM, it exits cleanly."""

from __future__ import annotations

import signal

import pytest

from faststream_sqla import MessageState
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import DELIVERY_QUEUE
from tests.support.helpers import SCRIPT, rows, wait_until
from tests.support.processes import exit_code, spawn
from tests.support.receiver import Reply, receiving

pytestmark = pytest.mark.slow

COUNT = 12


def _run(url: str):
    return (SCRIPT, "webhooks", "run", "--url", url, "--max-workers", "4",
            "--release-stuck-timeout", "2")  # fmt: skip


async def test_a_sigkilled_delivery_process_loses_no_delivery(
    make_broker, database_url, engine, tables, tmp_path
) -> None:
    # slow answers keep deliveries in flight when the process is killed
    with receiving(*[Reply(wait=0.3)] * COUNT) as (receiver, url):
        async with QueueAdmin(database_url) as admin:
            await admin.add_endpoint(
                "hook", url, topics=["jobs.#"], allow_private=True, retry_schedule=[0.1] * 5
            )
        broker = make_broker()
        async with broker:
            await broker.connect()
            ids = [(await broker.publish(n, topic="jobs.done"))[0] for n in range(COUNT)]
        m = tables.message
        webhook_ids = {r["headers"]["webhook-id"] for r in await rows(engine, m)}

        async with spawn(*_run(database_url), log=tmp_path / "first.log", pipe=False) as first:

            async def some_arrived() -> bool:
                return len(receiver.requests) >= 2

            await wait_until(some_arrived)
            first.send_signal(signal.SIGKILL)
            assert await exit_code(first) == -signal.SIGKILL

        async with spawn(*_run(database_url), log=tmp_path / "second.log", pipe=False) as second:
            a = tables.archive

            async def all_delivered() -> bool:
                done = await rows(engine, a, a.c.queue == DELIVERY_QUEUE)
                return len(done) == COUNT

            await wait_until(all_delivered, timeout=60)
            second.send_signal(signal.SIGTERM)
            assert await exit_code(second) == 0
        assert "Traceback" not in (tmp_path / "second.log").read_text()

    done = await rows(engine, tables.archive, tables.archive.c.queue == DELIVERY_QUEUE)
    assert sorted(r["id"] for r in done) == sorted(ids)
    assert {r["state"] for r in done} == {MessageState.COMPLETED}
    assert webhook_ids <= set(receiver.webhook_ids())
