"""The dashboard API shows who is running and what they hold, and the topic a message
was published to, on every database."""

from __future__ import annotations

import asyncio

from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin

from tests.support.helpers import FAST, Recorder, wait_until

from .conftest import ok

#: leases renewed, and the workers table refreshed, every 0.2 s
#: "gone" after three silent seconds: longer than a loaded host's pauses
QUICK = {**FAST, "release_stuck_timeout": 3.0}


async def test_workers_list_the_running_process_and_the_message_it_holds(database_url, api):
    broker = SqlaBroker(database_url)
    started, go = Recorder(), asyncio.Event()

    @broker.subscriber("orders", **QUICK)
    async def handle(body: str) -> None:
        started.record(body)
        await go.wait()

    async with broker:
        await broker.start()
        message_id = await broker.publish("one", queue="orders")
        await started.wait_for(1)

        async def lists_what_it_holds() -> bool:
            workers = ok(await api.get("/api/workers"))["workers"]
            return len(workers) == 1 and workers[0]["holding"] == [message_id]

        await wait_until(lists_what_it_holds)
        (worker,) = ok(await api.get("/api/workers"))["workers"]
        assert worker["queues"] == ["orders"] and worker["status"] == "alive"
        assert worker["in_flight"] == 1
        found = ok(await api.get(f"/api/messages/{message_id}"))
        assert (found["state"], found["held_by"]) == ("PROCESSING", worker["worker_id"])
        page = ok(await api.get("/api/queues/orders/messages"))["items"]
        assert [(m["id"], m["held_by"]) for m in page] == [(message_id, worker["worker_id"])]
        go.set()

    assert ok(await api.get("/api/workers")) == {"workers": []}  # stopped: its row is gone
    answer = await api.get("/api/workers", params={"gone_after": "0"})
    assert answer.status_code == 400 and answer.json()["error"], answer.text


async def test_a_message_shows_the_topic_it_was_published_to(database_url, api):
    async with QueueAdmin(database_url) as admin:
        await admin.bind("orders.*", "billing")
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        (copy,) = await broker.publish("x", topic="orders.created")
        direct = await broker.publish("y", queue="billing")
    assert ok(await api.get(f"/api/messages/{copy}"))["topic"] == "orders.created"
    assert ok(await api.get(f"/api/messages/{direct}"))["topic"] is None
