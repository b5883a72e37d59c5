"""`faststream-sqla messages QUEUE [--state ...] [--json]`: a queue's live messages by
state (ready, scheduled, retrying, processing, waiting) with keyset paging, and
`faststream-sqla queues` showing a paused queue and an open breaker; on every database."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from faststream_sqla import Envelope, MessageState, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.cli import app
from faststream_sqla.drivers.base import Outcome
from faststream_sqla.retry import ConstantRetryStrategy

from tests.support.helpers import FAST, wait_until

FAR = datetime(2099, 1, 1)


async def cli(*args: str, code: int = 0) -> Any:
    # in a thread: the command runs its own event loop, as from a shell
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


async def listed(url: str, *args: str) -> dict[str, Any]:
    return json.loads((await cli("messages", "q", "--url", url, "--json", *args)).stdout)


@pytest.fixture
async def one_of_each(database_url, engine, driver) -> dict[str, int]:
    """Queue q with a message in each listed state; the ids by state."""
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        ids = await broker.publish_batch(
            "processing",
            "retrying",
            "ready",
            Envelope("scheduled", delay=3600),
            Envelope("head", ordering_key="k"),
            Envelope("waiting", ordering_key="k"),
            queue="q",
        )
    (processing,) = await driver.claim(engine, "q", 1)
    (retrying,) = await driver.claim(engine, "q", 1)
    retry = Outcome(retrying.id, retrying.token, MessageState.RETRYABLE, 1, 1, next_attempt_at=FAR)
    assert await driver.write_outcomes(engine, [retry]) == 1
    return dict(zip(["processing", "retrying", "ready", "scheduled", "head", "waiting"], ids))


async def test_messages_lists_each_state_and_filters_by_state(database_url, one_of_each):
    page = await listed(database_url)
    by_id = {item["id"]: item["state"] for item in page["items"]}
    expected = {one_of_each[name]: name for name in one_of_each}
    expected[one_of_each["head"]] = "ready"  # the key's first message is due now
    assert by_id == expected and page["next_page"] is None
    assert [item["id"] for item in page["items"]] == sorted(by_id)  # oldest first
    for state in ("ready", "scheduled", "retrying", "processing", "waiting"):
        only = await listed(database_url, "--state", state)
        assert {item["state"] for item in only["items"]} == {state}
    both = await listed(database_url, "--state", "scheduled", "--state", "waiting")
    assert [i["id"] for i in both["items"]] == [one_of_each["scheduled"], one_of_each["waiting"]]


async def test_messages_pages_by_id_until_the_last(database_url, one_of_each):
    seen: list[int] = []
    after: list[str] = []
    while True:
        page = await listed(database_url, "--limit", "4", *after)
        seen += [item["id"] for item in page["items"]]
        if page["next_page"] is None:
            break
        after = ["--after", page["next_page"]]
    assert seen == sorted(one_of_each.values())
    text = (await cli("messages", "q", "--url", database_url, "--limit", "2")).output
    assert f"More: --after {one_of_each['retrying']}" in text  # the second id


@pytest.mark.parametrize(
    ("args", "code", "names"),
    [
        (["--state", "stuck"], 2, "cannot list state 'stuck'"),
        (["--after", "not-a-token"], 2, "not a page token"),
        (["--limit", "0"], 2, "0"),
    ],
)
async def test_messages_refuses_bad_values_as_usage_errors(
    database_url, one_of_each, args, code, names
):
    result = await cli("messages", "q", "--url", database_url, *args, code=code)
    assert names in result.output


async def test_messages_of_an_unknown_queue_is_one_line_and_exit_1(database_url):
    result = await cli("messages", "nope", "--url", database_url, code=1)
    assert "no queue 'nope'" in result.output


async def test_queues_shows_a_paused_queue_and_an_open_breaker(database_url, engine):
    broker = SqlaBroker(database_url)

    @broker.subscriber(
        "broken",
        circuit_breaker_threshold=1,
        circuit_breaker_cooldown=3600,
        retry_strategy=ConstantRetryStrategy(delay_seconds=3600, max_attempts=10),
        **FAST,
    )
    async def handle(body: str) -> None:
        raise RuntimeError("down")

    async with QueueAdmin(engine) as admin, broker:
        await broker.publish("x", queue="calm")
        await broker.publish("x", queue="stopped")
        await admin.pause_queue("stopped")
        await broker.publish("x", queue="broken")
        await broker.start()

        async def opened() -> bool:
            return [b.state for b in await admin.breakers("broken")] == ["OPEN"]

        await wait_until(opened)  # the breaker is written by the subscriber's process
    shown = {
        row["queue"]: (row["paused"], row["breaker"])
        for row in json.loads((await cli("queues", "--url", database_url, "--json")).stdout)
    }
    assert shown == {
        "calm": (False, "CLOSED"),
        "stopped": (True, "CLOSED"),
        "broken": (False, "OPEN"),
    }
    table = (await cli("queues", "--url", database_url)).output
    assert "OPEN" in table  # the flow column (80 columns wrap "paused" in a test)
