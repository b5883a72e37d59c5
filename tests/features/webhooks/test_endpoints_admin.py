"""Endpoints through the admin API, on every database: added with their topics, limits
and a secret shown once; listed with a hint of the secret only; disabled, enabled,
rotated, removed; bad values and private addresses refused before anything is
written."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
import sqlalchemy as sa

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.exceptions import (
    EndpointExistsError,
    InvalidEndpointError,
    UnknownEndpointError,
)
from faststream_sqla.schema import DELIVERY_QUEUE
from tests.support.helpers import rows

PUBLIC = "https://93.184.215.14/hook"  # an address on the public internet, never called


async def test_an_endpoint_is_added_with_its_topics_limits_and_a_secret_shown_once(
    database_url, caplog
) -> None:
    # ours at every level (a driver's own DEBUG log shows bound values: docs/webhooks.md)
    caplog.set_level(logging.DEBUG, logger="faststream_sqla")
    async with QueueAdmin(database_url) as admin:
        made = await admin.add_endpoint(
            "billing", PUBLIC, topics=["orders.*", "invoices.#"], max_concurrency=3,
            rate="5/s", headers={"Authorization": "Bearer partner-token"},
        )  # fmt: skip
        assert made.secret.startswith("whsec_") and len(made.secret) > 30
        (listed,) = await admin.endpoints()
        assert (listed.name, listed.url, listed.topics) == (
            "billing", PUBLIC, ("invoices.#", "orders.*")
        )
        assert listed.secret_hint == made.secret[:10] + "…"
        assert listed.header_names == ("Authorization",)
        assert listed.retry_schedule[0] == 5.0 and listed.disabled_at is None
        # its limits are its channel's on the delivery queue
        (channel,) = await admin.channels(DELIVERY_QUEUE)
        assert (channel.name, channel.max_concurrency, str(channel.rate)) == (
            "billing", 3, "5/s"
        )
    assert made.secret not in repr(made) and made.secret not in str(made)
    assert made.secret not in repr(listed) and made.secret not in caplog.text
    # a header's value is often a credential: only its name is listed
    assert "partner-token" not in repr(listed)


async def test_a_taken_name_bad_values_and_private_hosts_are_refused_before_any_write(
    database_url,
) -> None:
    async with QueueAdmin(database_url) as admin:
        await admin.add_endpoint("a", PUBLIC)
        with pytest.raises(EndpointExistsError, match="exists already"):
            await admin.add_endpoint("a", PUBLIC)
        for bad, match in [
            ({"url": "ftp://x.example/h"}, "http:// or https://"),
            ({"url": "https://user:pw@93.184.215.14/h"}, "must not hold a user"),
            ({"timeout": 0}, "timeout must be"),
            ({"headers": {"webhook-id": "x"}}, "set by the delivery"),
            ({"retry_schedule": [-1]}, "each retry delay"),
            ({"topics": ["orders..x"]}, "empty word"),
            ({"secret": "not-a-secret"}, "must be a str starting with"),
            ({"max_concurrency": 0}, "max_concurrency"),
            ({"url": "http://127.0.0.1:9/h"}, "private or local address"),
            ({"url": "http://localhost:9/h"}, "private or local address"),
            ({"url": "http://10.1.2.3/h"}, "private or local address"),
            ({"url": "http://[::1]:9/h"}, "private or local address"),
            # other spellings of loopback and "this host", as resolvers read them
            ({"url": "http://2130706433/h"}, "private or local address"),
            ({"url": "http://0x7f.1/h"}, "private or local address"),
            ({"url": "http://0/h"}, "private or local address"),
            ({"url": "http://[::ffff:127.0.0.1]/h"}, "private or local address"),
            ({"url": "http://hooks.invalid/h"}, "does not resolve"),
        ]:
            kwargs = {"url": PUBLIC, **bad}
            with pytest.raises((InvalidEndpointError, ValueError), match=match):
                await admin.add_endpoint("b", kwargs.pop("url"), **kwargs)
        assert [e.name for e in await admin.endpoints()] == ["a"]
        # allowed when the endpoint says so
        await admin.add_endpoint("local", "http://127.0.0.1:9/h", allow_private=True)
        assert [e.name for e in await admin.endpoints()] == ["a", "local"]


async def test_disable_enable_rotate_and_remove(database_url) -> None:
    async with QueueAdmin(database_url) as admin:
        first = await admin.add_endpoint("e", PUBLIC, topics=["t.#"])
        assert await admin.disable_endpoint("e", "maintenance") is True
        assert await admin.disable_endpoint("e") is False
        for reason in ("", "a\x00b", None):
            with pytest.raises(InvalidEndpointError, match="reason must be"):
                await admin.disable_endpoint("e", reason)  # type: ignore[arg-type]
        found = await admin.endpoint("e")
        assert found.disabled_reason == "maintenance" and found.disabled_at is not None
        (channel,) = await admin.channels(DELIVERY_QUEUE)
        assert channel.paused  # its pending deliveries wait
        assert await admin.enable_endpoint("e") is True
        assert (await admin.endpoint("e")).disabled_at is None
        assert not (await admin.channels(DELIVERY_QUEUE))[0].paused

        rotated = await admin.rotate_secret("e", grace=timedelta(hours=1))
        assert rotated.secret != first.secret
        after = await admin.endpoint("e")
        assert after.rotating and after.secret_hint == rotated.secret[:10] + "…"

        assert await admin.subscribe_endpoint("e", "u.*") is True
        assert await admin.unsubscribe_endpoint("e", "t.#") is True
        assert (await admin.endpoint("e")).topics == ("u.*",)

        assert await admin.remove_endpoint("e") == 0
        assert await admin.endpoints() == []
        for action in (
            admin.endpoint("e"), admin.enable_endpoint("e"), admin.disable_endpoint("e"),
            admin.remove_endpoint("e"), admin.rotate_secret("e"),
        ):  # fmt: skip
            with pytest.raises(UnknownEndpointError, match="no endpoint"):
                await action
        # nothing of a refused change stays behind: the pause went with the endpoint's row
        assert await admin.channels(DELIVERY_QUEUE) == []


async def test_remove_drops_the_endpoint_s_waiting_deliveries_and_channel_only(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await admin.add_endpoint("shop", PUBLIC, topics=["orders.#"], max_concurrency=2)
        await admin.add_endpoint("crm", PUBLIC, topics=["orders.#"], max_concurrency=3)
        broker = make_broker()
        async with broker:
            await broker.connect()
            for n in range(3):
                await broker.publish(n, topic="orders.created")
        assert await admin.remove_endpoint("shop") == 3
        m = tables.message
        left = await rows(engine, m, m.c.queue == DELIVERY_QUEUE)
        assert sorted(r["channel"] for r in left) == ["crm"] * 3
        assert [c.name for c in await admin.channels(DELIVERY_QUEUE)] == ["crm"]
        # a publish after the removal reaches only the endpoint left
        async with broker:
            await broker.connect()
            assert len(await broker.publish("x", topic="orders.created")) == 1


async def test_of_concurrent_adds_of_one_name_one_wins_and_the_others_are_told_it_exists(
    database_url,
) -> None:
    secrets = [f"whsec_{'MDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1u'[:-1]}{n}" for n in range(4)]
    admins = [QueueAdmin(database_url) for _ in secrets]
    try:
        for admin in admins:
            await admin.endpoints()  # connected and schema checked before the race

        outcomes = await asyncio.gather(
            *(
                admin.add_endpoint("shop", PUBLIC, topics=["orders.#"], secret=secret)
                for admin, secret in zip(admins, secrets, strict=True)
            ),
            return_exceptions=True,
        )
    finally:
        for admin in admins:
            await admin.close()
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and len(lost) == 3
    assert all(isinstance(o, EndpointExistsError) for o in lost), lost
    # a refused add names no secret, its own or the winner's
    assert not any(secret in str(o) for o in lost for secret in secrets)


async def test_a_subscribe_racing_a_removal_leaves_no_topic_behind(database_url, tables, engine):
    async with QueueAdmin(database_url) as admin, QueueAdmin(database_url) as other:
        for round_ in range(5):
            await admin.add_endpoint("shop", PUBLIC, topics=["orders.#"])
            outcomes = await asyncio.gather(
                admin.remove_endpoint("shop"),
                other.subscribe_endpoint("shop", f"round{round_}.#"),
                return_exceptions=True,
            )
            assert not isinstance(outcomes[0], BaseException), outcomes
            assert outcomes[1] is True or isinstance(outcomes[1], UnknownEndpointError), outcomes
            # a topic of a removed endpoint would reach the next endpoint of its name
            async with engine.connect() as conn:
                left = (await conn.execute(sa.select(tables.endpoint_topics.c.pattern))).all()
            assert left == []


async def test_update_changes_the_settings_given_and_keeps_the_rest(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        made = await admin.add_endpoint(
            "shop", PUBLIC, topics=["orders.#"], headers={"X-Tenant": "acme"}, timeout=10.0
        )
        broker = make_broker()
        async with broker:
            await broker.connect()
            await broker.publish("x", topic="orders.created")
        changed = await admin.update_endpoint(
            "shop", url="https://93.184.215.15/v2", retry_schedule=[1, 60], headers=None
        )
        assert (changed.url, changed.retry_schedule, changed.header_names) == (
            "https://93.184.215.15/v2", (1.0, 60.0), ()
        )  # fmt: skip
        # the rest as it was: its timeout, topics, secret and waiting delivery
        assert (changed.timeout, changed.topics) == (10.0, ("orders.#",))
        assert changed.secret_hint == made.secret[:10] + "…"
        m = tables.message
        assert len(await rows(engine, m, m.c.queue == DELIVERY_QUEUE)) == 1
        assert (await admin.update_endpoint("shop", retry_schedule=None)).retry_schedule[0] == 5.0

        # checked before anything is written, the private-address rule included
        for bad, match in [
            ({}, "nothing to change"),
            ({"url": "ftp://x.example/h"}, "http:// or https://"),
            ({"timeout": 1000}, "timeout must be"),
            ({"headers": {"Connection": "close"}}, "set by the delivery"),
            ({"allow_private": "yes"}, "allow_private must be"),
            ({"url": "http://127.0.0.1:9/h"}, "private or local address"),
        ]:
            with pytest.raises(InvalidEndpointError, match=match):
                await admin.update_endpoint("shop", **bad)
        assert (await admin.endpoint("shop")).url == "https://93.184.215.15/v2"
        with pytest.raises(UnknownEndpointError, match="no endpoint"):
            await admin.update_endpoint("nobody", timeout=5.0)
        # a private URL with allow_private given at once, or already stored
        local = await admin.update_endpoint("shop", url="http://127.0.0.1:9/h", allow_private=True)
        assert (local.url, local.allow_private) == ("http://127.0.0.1:9/h", True)
        assert (await admin.update_endpoint("shop", url="http://10.0.0.1/h")).allow_private
        # allow_private withdrawn while the URL is private: refused
        with pytest.raises(InvalidEndpointError, match="private or local address"):
            await admin.update_endpoint("shop", allow_private=False)
