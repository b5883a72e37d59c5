"""Webhook delivery to real HTTP receivers on 127.0.0.1, on every database: signed
requests, each response's rule (retry, wait, dead-letter, disable), timeouts, secret
rotation, and every attempt recorded."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
from datetime import timedelta

import sqlalchemy as sa

from faststream_sqla import MessageState
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import DELIVERY_QUEUE
from faststream_sqla.webhooks import WebhookDelivery, verify
from tests.support.helpers import captured_logger, rows, wait_until
from tests.support.receiver import Reply, receiving

FAST_RETRIES = [0.1, 0.1, 0.1]


async def _endpoint(database_url: str, url: str, **options) -> str:
    async with QueueAdmin(database_url) as admin:
        made = await admin.add_endpoint(
            "hook", url, topics=["orders.#"], allow_private=True,
            retry_schedule=options.pop("retry_schedule", FAST_RETRIES), **options,
        )  # fmt: skip
    return made.secret


def _deliverer(make_broker, **options):
    broker = make_broker(**options)
    WebhookDelivery(broker, max_workers=4, endpoint_refresh=0)
    return broker


async def _attempts(database_url: str, message_id: int, count: int) -> list:
    """The delivery's attempts, once `count` are recorded (they are written in batches)."""
    async with QueueAdmin(database_url) as admin:

        async def recorded() -> bool:
            return len(await admin.attempts(message_id)) >= count

        await wait_until(recorded)
        return await admin.attempts(message_id)


async def _delivered_twice(make_broker, database_url, engine, tables) -> tuple[sa.RowMapping, list]:
    """One publish delivered by a running deliverer: its archived row, once there, and
    its attempts, once two are recorded."""
    broker = _deliverer(make_broker)
    async with broker:
        await broker.start()
        (message_id,) = await broker.publish("x", topic="orders.paid")
        (archived,) = await _archived(engine, tables)
        return archived, await _attempts(database_url, message_id, 2)


async def _archived(engine, tables, count: int = 1) -> list[sa.RowMapping]:
    a = tables.archive

    async def done() -> bool:
        return len(await rows(engine, a, a.c.queue == DELIVERY_QUEUE)) >= count

    await wait_until(done)
    return await rows(engine, a, a.c.queue == DELIVERY_QUEUE)


async def test_a_delivery_is_signed_and_verifies_with_the_helper_and_by_hand(
    make_broker, database_url, engine, tables
) -> None:
    with receiving() as (receiver, url):
        secret = await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            (message_id,) = await broker.publish({"order": 7}, topic="orders.created")
            (done,) = await _archived(engine, tables)
    assert (done["id"], done["state"]) == (message_id, MessageState.COMPLETED)
    (request,) = receiver.requests
    verify(secret, request.headers, request.body)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{request.headers['webhook-id']}.{request.headers['webhook-timestamp']}.".encode()
    mac = base64.b64encode(hmac.new(key, signed + request.body, hashlib.sha256).digest())
    assert request.headers["webhook-signature"] == "v1," + mac.decode()
    assert request.body == b'{"order": 7}' or request.body == b'{"order":7}'
    assert request.headers["content-type"] == "application/json"


async def test_a_500_then_200_is_delivered_on_the_second_attempt_and_both_are_recorded(
    make_broker, database_url, engine, tables
) -> None:
    with receiving(Reply(500, body="try later")) as (receiver, url):
        await _endpoint(database_url, url)
        done, attempts = await _delivered_twice(make_broker, database_url, engine, tables)
    assert done["state"] == MessageState.COMPLETED and done["attempts_count"] == 2
    assert [(a.attempt, a.status, a.response_body) for a in attempts] == [
        (1, 500, "try later"), (2, 200, ""),
    ]  # fmt: skip
    ids = receiver.webhook_ids()
    assert len(ids) == 2 and ids[0] == ids[1]  # the receiver's idempotency key holds


async def test_a_429_with_retry_after_is_not_retried_sooner(
    make_broker, database_url, engine, tables
) -> None:
    with receiving(Reply(429, {"Retry-After": "2"})) as (receiver, url):
        await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            await broker.publish("x", topic="orders.paid")
            (done,) = await _archived(engine, tables)
    assert done["state"] == MessageState.COMPLETED
    first, second = receiver.requests
    assert second.at - first.at >= 2.0


async def test_a_400_dead_letters_after_one_attempt(
    make_broker, database_url, engine, tables
) -> None:
    with receiving(Reply(400, body="bad payload")) as (receiver, url):
        await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            await broker.publish("x", topic="orders.paid")
            (dead,) = await _archived(engine, tables)
    assert dead["state"] == MessageState.FAILED and dead["attempts_count"] == 1
    assert "HTTP 400" in dead["last_error"] and "bad payload" in dead["last_error"]
    assert len(receiver.requests) == 1


async def test_retries_past_the_schedule_dead_letter_and_each_failure_logs_one_line(
    make_broker, database_url, engine, tables, dialect_name
) -> None:
    logger, lines = captured_logger(f"test.webhooks.retries.{dialect_name}")
    with receiving(*[Reply(503)] * 5) as (receiver, url):
        await _endpoint(database_url, url, retry_schedule=[0.1])
        broker = _deliverer(make_broker, logger=logger)
        async with broker:
            await broker.start()
            await broker.publish("x", topic="orders.paid")
            (dead,) = await _archived(engine, tables)
    assert dead["state"] == MessageState.FAILED and dead["attempts_count"] == 2
    assert "the last its retry schedule allows" in dead["last_error"]
    (retry,) = lines.containing("RetryAfter")
    assert retry.getMessage() == "RetryAfter: retry after 0.1s: HTTP 503 from 'hook'"
    assert (retry.levelno, retry.exc_info) == (logging.WARNING, None)
    (refused,) = lines.containing("DeliveryRefused")
    assert (refused.levelno, refused.exc_info) == (logging.ERROR, None)


async def test_a_host_that_does_not_resolve_is_retried_not_dead_lettered_at_once(
    make_broker, database_url, engine, tables
) -> None:
    # .invalid never resolves (RFC 2606); added with allow_private, which skips the
    # check, then withdrawn in the table, as a resolver failing later would find it
    await _endpoint(database_url, "http://hooks.invalid/in", retry_schedule=[0.1])
    e = tables.endpoints
    async with engine.begin() as conn:
        await conn.execute(e.update().values(allow_private=False))
    dead, attempts = await _delivered_twice(make_broker, database_url, engine, tables)
    # both attempts made and recorded: a resolver failing for a while costs retries only
    assert [a.status for a in attempts] == [None, None]
    assert all("does not resolve" in (a.error or "") for a in attempts)
    assert dead["state"] == MessageState.FAILED and dead["attempts_count"] == 2


async def test_a_410_disables_the_endpoint_and_keeps_its_deliveries(
    make_broker, database_url, engine, tables
) -> None:
    with receiving(Reply(410)) as (receiver, url):
        await _endpoint(database_url, url, max_concurrency=1)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.connect()
            # all three before delivery starts: once disabled, the endpoint gets no more
            ids = await broker.publish_batch(0, 1, 2, topic="orders.paid")
            await broker.start()
            async with QueueAdmin(database_url) as admin:

                async def disabled() -> bool:
                    return (await admin.endpoint("hook")).disabled_at is not None

                await wait_until(disabled)
                endpoint = await admin.endpoint("hook")
                (channel,) = await admin.channels(DELIVERY_QUEUE)
    assert "410" in endpoint.disabled_reason and channel.paused
    m = tables.message
    kept = await rows(engine, m, m.c.queue == DELIVERY_QUEUE)
    assert sorted(r["id"] for r in kept) == ids
    assert len(receiver.requests) == 1


async def test_a_timeout_is_retried(make_broker, database_url, engine, tables) -> None:
    with receiving(Reply(wait=3.0)) as (receiver, url):
        await _endpoint(database_url, url, timeout=0.5)
        done, (first, second) = await _delivered_twice(make_broker, database_url, engine, tables)
    assert done["state"] == MessageState.COMPLETED
    assert first.status is None and "timed out" in (first.error or "")
    assert second.status == 200


async def test_during_a_secret_rotation_either_secret_verifies(
    make_broker, database_url, engine, tables
) -> None:
    with receiving() as (receiver, url):
        old = await _endpoint(database_url, url)
        async with QueueAdmin(database_url) as admin:
            new = (await admin.rotate_secret("hook", grace=timedelta(hours=1))).secret
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            await broker.publish("x", topic="orders.paid")
            await _archived(engine, tables)
    (request,) = receiver.requests
    verify(old, request.headers, request.body)
    verify(new, request.headers, request.body)
    assert len(request.headers["webhook-signature"].split()) == 2


async def test_attempts_show_in_inspect_the_api_and_the_page_escaped(
    make_broker, database_url, engine, tables
) -> None:
    import httpx

    from typer.testing import CliRunner

    from faststream_sqla.cli import app as cli_app
    from faststream_sqla.dashboard import create_app

    with receiving(Reply(500, body="<script>alert(1)</script>")) as (receiver, url):
        await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            (message_id,) = await broker.publish("x", topic="orders.paid")
            await _archived(engine, tables)
            await _attempts(database_url, message_id, 2)
    # (its last error, from the retried attempt, holds a traceback: the plain runner)
    args = ["inspect", str(message_id), "--url", database_url]
    shown = (await asyncio.to_thread(CliRunner().invoke, cli_app, args)).stdout
    assert "webhook attempt 1" in shown and "HTTP 500" in shown and "HTTP 200" in shown
    app = create_app(engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            detail = (await http.get(f"/api/messages/{message_id}")).json()
            page = (await http.get(f"/messages/{message_id}")).text
    assert [(a["attempt"], a["status"]) for a in detail["webhook_attempts"]] == [
        (1, 500), (2, 200),
    ]  # fmt: skip
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page


async def test_a_redriven_dead_delivery_is_delivered_again_with_its_webhook_id(
    make_broker, database_url, engine, tables
) -> None:
    with receiving(Reply(400)) as (receiver, url):
        await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            (message_id,) = await broker.publish("x", topic="orders.paid")
            (dead,) = await _archived(engine, tables)
            assert dead["state"] == MessageState.FAILED  # the 400
            async with QueueAdmin(database_url) as admin:
                moved = await admin.redrive(ids=[message_id])
            new_id = moved.moved[message_id]
            done = {r["id"]: r for r in await _archived(engine, tables, count=2)}
    assert done[message_id]["redriven_to"] == new_id
    assert done[new_id]["state"] == MessageState.COMPLETED
    first, second = receiver.webhook_ids()
    assert first == second


async def test_a_replayed_delivery_is_sent_again_with_its_webhook_id(
    make_broker, database_url, engine, tables
) -> None:
    with receiving() as (receiver, url):
        await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            (message_id,) = await broker.publish("x", topic="orders.paid")
            (done,) = await _archived(engine, tables)
            assert done["state"] == MessageState.COMPLETED
            async with QueueAdmin(database_url) as admin:
                moved = await admin.replay(ids=[message_id])
            new_id = moved.moved[message_id]
            replayed = {r["id"]: r for r in await _archived(engine, tables, count=2)}
    assert replayed[new_id]["state"] == MessageState.COMPLETED
    first, second = receiver.webhook_ids()
    assert first == second  # the receiver's idempotency key still tells it is the same


async def test_a_large_response_body_is_recorded_as_its_first_4_kib(
    make_broker, database_url, engine, tables
) -> None:
    with receiving(Reply(200, body="é" * 100_000)) as (_, url):
        await _endpoint(database_url, url)
        broker = _deliverer(make_broker)
        async with broker:
            await broker.start()
            (message_id,) = await broker.publish("x", topic="orders.paid")
            await _archived(engine, tables)
            async with QueueAdmin(database_url) as admin:

                async def recorded() -> bool:
                    return len(await admin.attempts(message_id)) == 1

                await wait_until(recorded)
                (attempt,) = await admin.attempts(message_id)
    assert attempt.status == 200
    assert attempt.response_body == "é" * 2048  # 4 KiB of a two-byte character
