"""The dashboard API's controls on every database: channels and their limits, queue
limits, channel pause and resume, circuit breakers and their reset, schedules paused
and resumed."""

from __future__ import annotations

from faststream_sqla import Envelope, SqlaBroker

from .conftest import ok, open_breaker


async def test_channel_limits_are_set_read_and_removed(database_url, api):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(Envelope("a", channel="acme"), Envelope("b", channel="beta"), queue="q")

    url = "/api/queues/q/channels/limits"
    acme = ok(await api.put(url, params={"channel": "acme"}, json={"max_concurrency": 2, "rate": "5/s"}))
    assert acme["max_concurrency"] == 2 and acme["rate"] == {"count": 5, "period": 1.0, "text": "5/s"}
    # a field left out stays; null removes
    acme = ok(await api.put(url, params={"channel": "acme"}, json={"rate": None}))
    assert acme["max_concurrency"] == 2 and acme["rate"] is None
    limits = ok(await api.put("/api/queues/q/limits", json={"channel_max_concurrency": 3}))
    assert limits["channel_max_concurrency"] == 3 and limits["max_concurrency"] is None

    assert ok(await api.post("/api/queues/q/channels/pause", params={"channel": "beta"})) == {"changed": True}
    listed = ok(await api.get("/api/queues/q/channels"))
    channels = {c["name"]: c for c in listed["channels"]}
    assert channels["beta"]["paused"] and channels["beta"]["effective_max_concurrency"] == 3
    assert channels["acme"]["ready"] == 1 and channels["acme"]["effective_max_concurrency"] == 2
    assert listed["queue"]["channel_max_concurrency"] == 3
    assert ok(await api.post("/api/queues/q/channels/resume", params={"channel": "beta"})) == {"changed": True}

    for params, body in (
        ({"channel": "acme"}, {"max_concurrency": 0}),
        ({"channel": "acme"}, {"rate": "fast"}),
        ({"channel": "acme"}, {"limit": 1}),
        ({}, {"max_concurrency": 1}),
    ):
        bad = await api.put(url, params=params, json=body)
        assert bad.status_code == 400 and bad.json()["error"], (params, body, bad.text)


async def test_an_open_breaker_is_listed_and_reset(engine, tables, api):
    await open_breaker(engine, tables, "q")
    (breaker,) = ok(await api.get("/api/breakers"))["breakers"]
    assert (breaker["queue"], breaker["state"], breaker["consecutive_failures"]) == ("q", "OPEN", 3)
    assert ok(await api.post("/api/queues/q/breaker/reset")) == {"changed": True}
    (breaker,) = ok(await api.get("/api/breakers", params={"queue": "q"}))["breakers"]
    assert breaker["state"] == "CLOSED" and breaker["recent"][0]["reason"] == "manual reset"


async def test_schedules_are_listed_paused_and_resumed(database_url, api):
    async with SqlaBroker(database_url) as broker:
        broker.schedule("reports", {"kind": "daily"}, cron="0 6 * * *", name="daily")
        await broker.start()
    (daily,) = ok(await api.get("/api/schedules"))["schedules"]
    assert (daily["name"], daily["kind"], daily["cron"], daily["paused"]) == (
        "daily", "cron", "0 6 * * *", False
    )
    assert daily["body"] == {"encoding": "text", "data": '{"kind":"daily"}'}
    assert ok(await api.post("/api/schedules/daily/pause"))["paused"] is True
    assert ok(await api.post("/api/schedules/daily/resume"))["paused"] is False
    missing = await api.post("/api/schedules/nope/pause")
    assert missing.status_code == 404 and "no schedule 'nope'" in missing.json()["error"]
