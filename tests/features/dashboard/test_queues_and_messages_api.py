"""The dashboard API's queues and messages on every database: figures per queue,
pages of live messages with their filters, one message live or archived, pause,
resume and purge."""

from __future__ import annotations

from faststream_sqla import Envelope, SqlaBroker

from .conftest import fail, ok


async def test_queues_list_counts_throughput_and_controls(database_url, engine, driver, api):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("a", "b", "c", Envelope("later", delay=3600), queue="q")
        await broker.publish("x", queue="other")
    await fail(driver, engine, "q", 1)
    ok(await api.post("/api/queues/other/pause"))

    queues = {q["queue"]: q for q in ok(await api.get("/api/queues"))["queues"]}
    assert set(queues) == {"q", "other"}
    q = queues["q"]
    assert q["counts"]["ready"] == {"value": 2, "exact": True}
    assert q["counts"]["scheduled"] == {"value": 1, "exact": True}
    assert q["handled_per_minute"]["value"] == 1 and q["failed_per_minute"]["value"] == 1
    assert q["failed_last_hour"]["value"] == 1
    assert q["oldest_ready_age"] >= 0 and q["breaker"] == "CLOSED" and not q["paused"]
    assert queues["other"]["paused"]
    assert ok(await api.post("/api/queues/other/resume")) == {"changed": True}
    assert ok(await api.post("/api/queues/other/resume")) == {"changed": False}


async def test_message_pages_filter_and_go_on_from_next_page(database_url, api):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        ids = await broker.publish_batch(
            *(Envelope(f"m{i}", channel="acme" if i % 2 else None) for i in range(5)),
            queue="q",
        )
        keyed = await broker.publish("k", queue="q", ordering_key="ok-1", correlation_id="c-9")

    first = ok(await api.get("/api/queues/q/messages", params={"limit": 4}))
    assert [m["id"] for m in first["items"]] == [keyed, *ids[::-1][:3]]  # newest first
    rest = ok(await api.get("/api/queues/q/messages", params={"before": first["next_page"]}))
    assert [m["id"] for m in rest["items"]] == ids[1::-1] and rest["next_page"] is None

    acme = ok(await api.get("/api/queues/q/messages", params={"channel": "acme"}))
    assert [m["id"] for m in acme["items"]] == [ids[3], ids[1]]
    by_key = ok(await api.get("/api/queues/q/messages", params={"ordering_key": "ok-1"}))
    by_correlation = ok(await api.get("/api/queues/q/messages", params={"correlation_id": "c-9"}))
    assert [m["id"] for m in by_key["items"]] == [m["id"] for m in by_correlation["items"]] == [keyed]
    ready = ok(await api.get("/api/queues/q/messages", params=[("state", "ready"), ("state", "waiting")]))
    assert len(ready["items"]) == 6

    for params, word in (
        ({"state": "done"}, "cannot list state"),
        ({"before": "x1"}, "not a page token"),
        ({"limit": 0}, "limit"),
        ({"channel": ""}, "channel"),
    ):
        bad = await api.get("/api/queues/q/messages", params=params)
        assert bad.status_code == 400 and word in bad.json()["error"], bad.text
    unknown = await api.get("/api/queues/nope/messages")
    assert unknown.status_code == 404 and "no queue 'nope'" in unknown.json()["error"]


async def test_message_detail_of_live_and_archived_messages(database_url, engine, driver, api):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        live = await broker.publish(
            {"order": 1}, queue="q", headers={"h": "v"}, correlation_id="c-1", priority=4,
            ordering_key="k", channel="acme",
        )
        binary = await broker.publish(b"\xff\x00", queue="bin")
        gone = await broker.publish("bye", queue="q2")
    await fail(driver, engine, "q2", 1, error="RuntimeError: nope")

    found = ok(await api.get(f"/api/messages/{live}"))
    assert (found["queue"], found["state"], found["archived"]) == ("q", "PENDING", False)
    assert found["body"] == {"encoding": "text", "data": '{"order":1}'}
    assert found["headers"]["h"] == "v"
    assert (found["channel"], found["ordering_key"], found["priority"]) == ("acme", "k", 4)
    assert found["saved_state"] is None and found["next_attempt_at"] is not None
    assert ok(await api.get(f"/api/messages/{binary}"))["body"] == {
        "encoding": "base64", "data": "/wA="
    }

    archived = ok(await api.get(f"/api/messages/{gone}"))
    assert (archived["state"], archived["archived"], archived["last_error"]) == (
        "FAILED", True, "RuntimeError: nope"
    )
    assert archived["archived_at"] is not None and archived["redriven_to"] is None

    assert (await api.get("/api/messages/999999")).status_code == 404
    for bad in ("0", "x", str(2**64)):
        answer = await api.get(f"/api/messages/{bad}")
        assert answer.status_code == 400 and answer.json()["error"], answer.text


async def test_purge_deletes_waiting_messages_and_names_unknown_queues(database_url, driver, engine, api):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("a", "b", "c", queue="q")
    await driver.claim(engine, "q", 1)  # in flight: a purge leaves it
    assert ok(await api.post("/api/queues/q/purge")) == {"deleted": 2}
    (q,) = ok(await api.get("/api/queues"))["queues"]
    assert q["counts"]["ready"]["value"] == 0 and q["counts"]["processing"]["value"] == 1
    assert (await api.post("/api/queues/nope/purge")).status_code == 404
