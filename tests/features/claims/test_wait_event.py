"""subscriber.loops.wait_event: the loops' wait for an event with a timeout."""

from __future__ import annotations

import asyncio

from faststream_sqla.subscriber.loops import wait_event


async def test_a_set_event_still_lets_the_loop_turn():
    """A loop that waits on an event left set must not keep the others from running."""
    event = asyncio.Event()
    event.set()
    ran = []
    asyncio.get_running_loop().call_soon(ran.append, True)
    await wait_event(event, 10)
    assert ran == [True]


async def test_the_waiter_resumes_the_turn_after_the_event_is_set():
    """Waiting in the caller's own task: the turn after set() resumes it, where
    wait_for's task of its own took three."""
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_event(event, 10))
    await asyncio.sleep(0)  # the waiter is waiting
    event.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiter.done()


async def test_the_timeout_ends_the_wait_and_leaves_the_caller_uncancelled():
    event = asyncio.Event()
    await wait_event(event, 0.01)
    assert not event.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
