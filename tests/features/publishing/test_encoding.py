"""What a publish writes for each kind of body, without a database."""

from __future__ import annotations

import pytest

from faststream_sqla import SqlaBroker


@pytest.fixture
def broker(tmp_path) -> SqlaBroker:
    return SqlaBroker(f"sqlite+aiosqlite:///{tmp_path}/never-created.db")


async def test_publish_encodes_like_the_codec_it_skips(broker: SqlaBroker) -> None:
    # With FastStream's default codec the producer calls encode_message itself (no
    # coroutine per body); rows must be what the codec's own encode gives.
    from faststream._internal.parser import DefaultCodec
    from faststream.response.publish_type import PublishType

    from faststream_sqla.response import SqlaPublishCommand

    class SameAsDefault(DefaultCodec):  # not the default type: the codec is awaited
        __slots__ = ()

    bodies = ("text", b"\x00raw", {"a": [1, 2]}, 7, None, [1.5, "x"])
    cmd = SqlaPublishCommand(*bodies, queue="q", _publish_type=PublishType.PUBLISH)
    producer = broker.config.producer
    direct = await producer.build_rows(cmd, cmd.batch_items)
    producer.codec = SameAsDefault()
    awaited = await producer.build_rows(cmd, cmd.batch_items)
    assert [(r.payload, r.headers) for r in direct] == [(r.payload, r.headers) for r in awaited]
