"""Bindings of topic patterns to queues, through the admin API and the command line:
binding is idempotent, unbinding says whether there was a binding, `route` tells which
queues a topic reaches. On every database."""

from __future__ import annotations

import asyncio

import pytest

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.exceptions import InvalidQueueNameError, InvalidTopicError

from tests.support.cli import cli, cli_json


async def test_bind_is_idempotent_and_route_follows_both_wildcards(database_url: str) -> None:
    async with QueueAdmin(database_url) as admin:
        assert await admin.bind("orders.*", "billing") is True
        assert await admin.bind("orders.*", "billing") is False
        assert await admin.bind("orders.#", "audit") is True
        assert await admin.bind("#.created", "welcome") is True
        assert await admin.bind("payments.*", "ledger") is True

        assert await admin.route("orders.created") == ["audit", "billing", "welcome"]
        assert await admin.route("orders") == ["audit"]  # `#` matching zero words
        assert await admin.route("orders.eu.paid") == ["audit"]
        assert await admin.route("users.created") == ["welcome"]
        assert await admin.route("shipping.sent") == []

        listed = await admin.bindings()
        assert [(b.pattern, b.queue) for b in listed] == [
            ("#.created", "welcome"),
            ("orders.#", "audit"),
            ("orders.*", "billing"),
            ("payments.*", "ledger"),
        ]
        assert all(b.created_at.tzinfo is not None for b in listed)
        assert [b.pattern for b in await admin.bindings(queue="billing")] == ["orders.*"]

        assert await admin.unbind("orders.*", "billing") is True
        assert await admin.unbind("orders.*", "billing") is False
        assert await admin.route("orders.created") == ["audit", "welcome"]


async def test_concurrent_binds_of_one_pair_both_succeed(database_url: str) -> None:
    async with QueueAdmin(database_url) as one, QueueAdmin(database_url) as other:
        results = await asyncio.gather(
            *(admin.bind("orders.*", "billing") for admin in (one, other) for _ in range(3))
        )
        assert results.count(True) == 1
        assert [(b.pattern, b.queue) for b in await one.bindings()] == [("orders.*", "billing")]


@pytest.mark.parametrize(
    ("pattern", "queue", "error"),
    [
        ("orders..x", "q", InvalidTopicError),
        ("orders.cre*", "q", InvalidTopicError),
        ("orders.*", "", InvalidQueueNameError),
    ],
)
async def test_bad_bindings_are_refused_before_anything_is_written(
    database_url: str, pattern: str, queue: str, error: type[Exception]
) -> None:
    async with QueueAdmin(database_url) as admin:
        with pytest.raises(error):
            await admin.bind(pattern, queue)
        with pytest.raises(InvalidTopicError, match="wildcard"):
            await admin.route("orders.*")
        assert await admin.bindings() == []


async def test_topic_commands_bind_list_route_and_unbind(database_url: str) -> None:
    out = await cli(database_url, "topic", "bind", "orders.*", "billing")
    assert "Bound orders.* to queue billing." in out.stdout
    out = await cli(database_url, "topic", "bind", "orders.*", "billing")
    assert "already" in out.stdout
    await cli(database_url, "topic", "bind", "orders.#", "audit")

    listed = await cli_json(database_url, "topic", "list")
    assert [(b["pattern"], b["queue"]) for b in listed] == [
        ("orders.#", "audit"),
        ("orders.*", "billing"),
    ]
    table = (await cli(database_url, "topic", "list", "--queue", "audit")).stdout
    assert "orders.#" in table and "billing" not in table

    routed = (await cli(database_url, "topic", "route", "orders.created")).stdout
    assert "audit" in routed and "billing" in routed and "endpoint" not in routed
    routed = await cli_json(database_url, "topic", "route", "orders")
    assert routed == {"topic": "orders", "queues": ["audit"], "endpoints": []}

    out = await cli(database_url, "topic", "unbind", "orders.*", "billing")
    assert "Unbound" in out.stdout
    out = await cli(database_url, "topic", "unbind", "orders.*", "billing")
    assert "was not bound" in out.stdout
    out = await cli(database_url, "topic", "route", "shipping.sent")
    assert "No queue is bound" in out.stdout


async def test_topic_commands_refuse_malformed_patterns(database_url: str) -> None:
    out = await cli(database_url, "topic", "bind", "orders..x", "billing", code=2)
    assert "empty word" in out.output
    out = await cli(database_url, "topic", "route", "orders.*", code=2)
    assert "wildcard" in out.output


async def test_publish_command_sends_a_copy_to_each_bound_queue(database_url: str) -> None:
    out = await cli(database_url, "publish", "--topic", "orders.created", '{"a": 1}')
    assert "No queue is bound to topic orders.created" in out.stdout
    await cli(database_url, "topic", "bind", "orders.*", "billing")
    await cli(database_url, "topic", "bind", "#", "audit")
    sent = await cli_json(database_url, "publish", "--topic", "orders.created", '{"a": 1}')
    assert sent["topic"] == "orders.created" and len(sent["ids"]) == 2
    audit_id, billing_id = sent["ids"]
    async with QueueAdmin(database_url) as admin:
        assert (await admin.inspect(audit_id)).queue == "audit"
        found = await admin.inspect(billing_id)
        assert (found.queue, found.topic, found.payload) == (
            "billing",
            "orders.created",
            b'{"a":1}',
        )
    out = await cli(database_url, "publish", "--topic", "orders.paid", "x", "--priority", "3")
    assert "Published 2 copies to topic orders.paid" in out.stdout

    out = await cli(database_url, "publish", "billing", "x", "--topic", "orders.a", code=2)
    assert "either a QUEUE or --topic" in out.output
    out = await cli(database_url, "publish", "--topic", "orders.*", "x", code=2)
    assert "wildcard" in out.output
    out = await cli(database_url, "publish", "billing", code=2)
    assert "missing BODY" in out.output
