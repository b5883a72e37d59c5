"""FastStream's publish-command contract allows `cmd.batch_bodies = ()` (the body becomes
None, no extra bodies); a publish that reaches the database with no message left is
refused there, with a typed error, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from faststream import BaseMiddleware
from faststream.response.publish_type import PublishType

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.response import SqlaPublishCommand

from tests.support.helpers import rows


def test_setting_no_batch_bodies_leaves_no_body_as_faststream_defines():
    cmd = SqlaPublishCommand(
        "a", Envelope("b", priority=3), queue="q", _publish_type=PublishType.PUBLISH
    )
    cmd.batch_bodies = ()
    assert cmd.body is None and cmd.extra_bodies == () and cmd.batch_bodies == ()
    cmd.batch_bodies = ("c", "d")
    assert (cmd.body, cmd.extra_bodies, cmd.batch_bodies) == ("c", ("d",), ("c", "d"))


def test_a_single_none_body_is_still_one_message():
    cmd = SqlaPublishCommand(None, queue="q", _publish_type=PublishType.PUBLISH)
    assert cmd.batch_bodies == (None,)


class DropAll(BaseMiddleware):
    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        cmd.batch_bodies = ()
        return await call_next(cmd)


async def test_a_publish_emptied_by_a_middleware_is_refused_and_writes_nothing(
    database_url, engine, tables
):
    async with SqlaBroker(database_url, middlewares=(DropAll,)) as broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match="at least one message"):
            await broker.publish_batch("a", Envelope("b", priority=7), queue="q")
        with pytest.raises(InvalidOptionError, match="at least one message"):
            await broker.publish("a", queue="q")
    assert await rows(engine, tables.message) == []
