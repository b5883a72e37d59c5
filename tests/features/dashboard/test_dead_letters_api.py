"""The dashboard API's dead letters on every database: pages filtered by error, the
summary, redrive by ids and by filter (a count first, then the move on confirm),
replay, and the conflicts a move refuses."""

from __future__ import annotations

from faststream_sqla import SqlaBroker

from .conftest import fail, ok


async def _dead_letters(database_url, driver, engine) -> tuple[list[int], list[int]]:
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*(f"m{i}" for i in range(5)), queue="q")
        await broker.publish("o", queue="other")
    timeouts = await fail(driver, engine, "q", 3, error="TimeoutError: slow\n  at line 1")
    values = await fail(driver, engine, "q", 2, error="ValueError: 50% bad")
    await fail(driver, engine, "other", 1, error="ValueError: 50% bad")
    return timeouts, values


async def test_dead_letters_list_with_errors_and_filter_by_error(database_url, driver, engine, api):
    timeouts, values = await _dead_letters(database_url, driver, engine)
    every = ok(await api.get("/api/dead-letters", params={"queue": "q"}))
    assert sorted(d["id"] for d in every["items"]) == sorted(timeouts + values)
    assert all(d["last_error"] for d in every["items"])

    # the error is matched as written: "%" is no wildcard
    chosen = ok(await api.get("/api/dead-letters", params={"error": "ValueError: 50%"}))
    assert {d["queue"] for d in chosen["items"]} == {"q", "other"} and len(chosen["items"]) == 3
    assert ok(await api.get("/api/dead-letters", params={"error": "Value%"}))["items"] == []

    paged = ok(await api.get("/api/dead-letters", params={"queue": "q", "limit": 2}))
    more = ok(
        await api.get("/api/dead-letters", params={"queue": "q", "after": paged["next_page"]})
    )
    assert len(paged["items"]) == 2 and len(more["items"]) == 3

    summaries = {s["queue"]: s for s in ok(await api.get("/api/dead-letters/summary"))["queues"]}
    assert summaries["q"]["count"] == {"value": 5, "exact": True}
    assert summaries["q"]["common_errors"][0] == {"error": "TimeoutError: slow", "count": 3}
    assert (await api.get("/api/dead-letters", params={"queue": "nope"})).status_code == 404
    assert (await api.get("/api/dead-letters", params={"after": "nonsense"})).status_code == 400


async def test_redrive_by_filter_counts_first_then_moves_on_confirm(
    database_url, driver, engine, api
):
    timeouts, values = await _dead_letters(database_url, driver, engine)
    ask = {"queue": "q", "error": "TimeoutError"}
    preview = ok(await api.post("/api/dead-letters/redrive", json=ask))
    assert preview["confirmed"] is False and preview["would_move"] == {"value": 3, "exact": True}
    queues = {q["queue"]: q for q in ok(await api.get("/api/queues"))["queues"]}
    assert queues["q"]["counts"]["ready"]["value"] == 0  # nothing moved yet

    done = ok(await api.post("/api/dead-letters/redrive", json={**ask, "confirm": True}))
    assert done["confirmed"] and sorted(map(int, done["moved"])) == sorted(timeouts)
    for old, new in done["moved"].items():
        moved = ok(await api.get(f"/api/messages/{old}"))
        assert moved["state"] == "REDRIVEN" and moved["redriven_to"] == new
        assert ok(await api.get(f"/api/messages/{new}"))["redriven_from"] == int(old)

    everything = ok(await api.post("/api/dead-letters/redrive", json={"all": True}))
    assert everything["would_move"]["value"] == 3  # the ValueErrors of both queues


async def test_redrive_by_ids_and_the_moves_it_refuses(database_url, driver, engine, api):
    timeouts, values = await _dead_letters(database_url, driver, engine)
    done = ok(await api.post("/api/dead-letters/redrive", json={"ids": values}))
    assert sorted(map(int, done["moved"])) == sorted(values) and done["skipped"] == {}

    again = await api.post("/api/dead-letters/redrive", json={"ids": values[:1]})
    assert again.status_code == 409 and "already moved back" in again.json()["error"]
    live = next(iter(done["moved"].values()))
    queued = await api.post("/api/dead-letters/redrive", json={"ids": [live]})
    assert queued.status_code == 409 and "still queued" in queued.json()["error"]
    assert (await api.post("/api/dead-letters/redrive", json={"ids": [999999]})).status_code == 404
    for body in (
        {"ids": []},
        {"ids": [0]},
        {"ids": ["x"]},
        {"ids": timeouts, "queue": "q"},
        {},
        {"queue": "q", "all": True},
        {"queue": "q", "typo": 1},
    ):
        bad = await api.post("/api/dead-letters/redrive", json=body)
        assert bad.status_code == 400 and bad.json()["error"], (body, bad.text)
    assert (await api.post("/api/dead-letters/redrive", content=b"{not json")).status_code == 400


async def test_replay_moves_completed_messages_by_filter_and_ids(
    database_url, driver, engine, api
):
    timeouts, values = await _dead_letters(database_url, driver, engine)
    ask = {"queue": "q", "states": ["FAILED"], "error": "ValueError"}
    assert ok(await api.post("/api/messages/replay", json=ask))["would_move"]["value"] == 2
    done = ok(await api.post("/api/messages/replay", json={**ask, "confirm": True}))
    assert sorted(map(int, done["moved"])) == sorted(values)
    by_id = ok(await api.post("/api/messages/replay", json={"ids": timeouts[:1]}))
    assert list(map(int, by_id["moved"])) == timeouts[:1]
    bad = await api.post("/api/messages/replay", json={"queue": "q", "states": ["PENDING"]})
    assert bad.status_code == 400 and "cannot replay state" in bad.json()["error"]
