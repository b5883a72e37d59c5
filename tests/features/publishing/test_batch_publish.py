"""A batch publish: a batch given as one list is refused before anything is written, and a
publish middleware that replaces the batch's bodies (FastStream's batch API) keeps each
enveloped item's options or is refused whole, on every database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from faststream import BaseMiddleware

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.helpers import rows


# -- publish_batch([a, b]) -------------------------------------------------------------------
async def test_a_batch_given_as_one_list_is_refused_before_anything_is_written(
    database_url, engine, tables
):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match=r"publish_batch\(\*items, queue=\.\.\.\)"):
            await broker.publish_batch(["a", "b"], queue="q")
        with pytest.raises(InvalidOptionError, match="one tuple of 2 items"):
            await broker.publisher("q").publish_batch(("a", "b"))
        assert len(await broker.publish_batch(*["a", "b"], queue="q")) == 2
        await broker.publish(["a", "b"], queue="q")  # one message whose body is a list
    a, b, listed = await rows(engine, tables.message)
    assert (a["payload"], b["payload"], json.loads(listed["payload"])) == (b"a", b"b", ["a", "b"])


# -- a publish middleware replacing cmd.batch_bodies (FastStream's batch API) ----------------
class Shout(BaseMiddleware):
    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        cmd.batch_bodies = tuple(body.upper() for body in cmd.batch_bodies)
        return await call_next(cmd)


class DropFirst(BaseMiddleware):
    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        cmd.batch_bodies = cmd.batch_bodies[1:]
        return await call_next(cmd)


async def test_a_middleware_replaces_batch_bodies_and_envelopes_keep_their_options(
    database_url, engine, tables
):
    async with SqlaBroker(database_url, middlewares=(Shout,)) as broker:
        await broker.connect()
        await broker.publish_batch(
            "a", Envelope("b", priority=7, headers={"k": "v"}), queue="q"
        )
    a, b = await rows(engine, tables.message)
    assert (a["payload"], a["priority"]) == (b"A", 0)
    assert (b["payload"], b["priority"], b["headers"]["k"]) == (b"B", 7, "v")


async def test_a_middleware_that_drops_an_enveloped_item_is_refused_whole(
    database_url, engine, tables
):
    async with SqlaBroker(database_url, middlewares=(DropFirst,)) as broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match="one for one"):
            await broker.publish_batch("a", Envelope("b", priority=7), queue="q")
        assert len(await broker.publish_batch("a", "b", "c", queue="q")) == 2
    assert [r["payload"] for r in await rows(engine, tables.message)] == [b"b", b"c"]
