"""The listener's start-up check that notifications reach it (docs/production.md's
connection poolers): on a direct connection it hears its own echo and counts as
connected, and the echoes of other processes' checks wake no queue anywhere."""

from __future__ import annotations

import pytest

from faststream_sqla import SqlaBroker
from tests.features.wakeups.test_local_and_notify import _listening_subscriber
from tests.support.helpers import Recorder

pytestmark = pytest.mark.databases("postgresql")


async def test_a_direct_listener_hears_its_own_echo_and_passes_on_no_other(server_databases):
    url = server_databases["postgresql"]
    handled = Recorder()  # by either broker: they share the queue
    first = await _listening_subscriber(url, handled)
    heard = Recorder()
    passed_on = first.notifications.on_queue

    def spy(queue: str) -> None:  # what the first listener passes on to its subscribers
        heard.record(queue)
        passed_on(queue)

    first.notifications.on_queue = spy
    try:
        second = await _listening_subscriber(url, handled)  # its check's echo reaches the first too
        try:
            assert (first.notifications.hearing, second.notifications.hearing) == (True, True)
            async with SqlaBroker(url) as producer:
                await producer.publish("hello", queue="a")
            await heard.wait_for(1, timeout=30)
            await handled.wait_for(1, timeout=30)
        finally:
            await second.stop()
    finally:
        await first.stop()
    # notifications arrive in commit order: the second's echo came before "a"
    assert heard.calls == ["a"]
    assert handled.calls == ["hello"]
