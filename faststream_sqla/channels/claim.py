"""The channel claim, run: up to `limit` messages of one queue, within every limit,
with the queue's channels taking turns.

A claim reads (its database's statements: faststream_sqla.drivers.channel_claim and
each database's own `channel_claim.py`), plans (plan.py, pure), then writes; the write
applies only if the queue row's version is still the one read, else the claim reads
again, after a short random pause so that the claims which collided do not collide
again in step.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from .plan import Candidate, ProbeMissed, QueueRow, plan

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.drivers.channel_claim import ChannelSession
    from faststream_sqla.message import ClaimedMessage

    from .read_ahead import ReadAhead

#: reads a claim makes when other claims keep moving the queue's version meanwhile
CONFLICT_RETRIES = 4
#: the longest pause before a read again, in seconds; each pause is random up to
#: this times the number of conflicts so far
CONFLICT_PAUSE = 0.002


async def write_planned(
    session: ChannelSession,
    queue: str,
    read: tuple[QueueRow, list[Candidate]],
    limit: int,
    *,
    channel_breakers: bool,
) -> list[ClaimedMessage] | None:
    """Plan a claim of up to `limit` from its read and write it; [] if the read leaves
    nothing to claim, None if the version moved."""
    head, candidates = read
    planned = plan(head, candidates, limit, channel_breakers=channel_breakers)
    if planned is None:
        return []
    return await session.write(queue, head, planned)


async def claim_once(
    driver: Driver, engine: AsyncEngine, queue: str, limit: int, *, channel_breakers: bool
) -> list[ClaimedMessage] | None:
    """One try of the claim: a read, then a write in its session; None if another
    claim changed the queue, or a channel's breaker, in between."""
    try:
        async with driver.channel_session(engine) as session:
            head, candidates = await session.read(queue, limit)
            if head is not None:
                return await write_planned(
                    session, queue, (head, candidates), limit, channel_breakers=channel_breakers
                )
    except ProbeMissed:
        return None  # rolled back: read again
    await driver.channel_claim.create_queue_row(engine, queue)
    return None


async def claim_channelled(
    driver: Driver,
    engine: AsyncEngine,
    queue: str,
    limit: int,
    *,
    channel_breakers: bool = False,
    ahead: ReadAhead | None = None,
    on_contended: Callable[[], None] | None = None,
) -> list[ClaimedMessage]:
    """Up to `limit` messages of `queue` within its limits and its channels';
    `channel_breakers`: the channels' own breakers hold them too (see `plan`). `ahead`:
    this claim's read, made while the workers were busy (read_ahead), used if it still
    may be. `on_contended` is called when other claims kept changing the queue until
    this one gave up: its [] does not mean nothing was claimable."""
    if ahead is not None:
        rows = await ahead.claim(limit, channel_breakers=channel_breakers)
        if rows:
            return rows
    for conflicts in range(CONFLICT_RETRIES):
        if conflicts:
            await asyncio.sleep(random.uniform(0, CONFLICT_PAUSE * conflicts))
        rows = await claim_once(driver, engine, queue, limit, channel_breakers=channel_breakers)
        if rows is not None:
            return rows
    if on_contended is not None:
        on_contended()
    return []


__all__ = ["claim_channelled", "claim_once", "write_planned"]
