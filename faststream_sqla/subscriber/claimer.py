"""The one place that picks how a queue's messages are claimed: the plain claim for a
queue without channels or limits, the channel claim (limits, fair turns, rates,
channel breakers) for one with them. The fetcher and get_one() both claim here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faststream_sqla.channels.claim import claim_channelled

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.channels.read_ahead import ReadAhead
    from faststream_sqla.drivers import Driver
    from faststream_sqla.message import ClaimedMessage


class Claimer:
    """Claims for one subscriber. `channel_breakers`: its messages with a channel
    count toward their channel's breaker, which the channel claim then enforces."""

    def __init__(self, driver: Driver, engine: AsyncEngine, *, channel_breakers: bool) -> None:
        self.driver, self.engine = driver, engine
        self.channel_breakers = channel_breakers
        #: the last channel claim gave up because other claims kept changing its
        #: queue (the fetcher then tries again soon rather than at its next poll)
        self.contended = False

    async def claim(
        self, queue: str, limit: int, *, channelled: bool, ahead: ReadAhead | None = None
    ) -> list[ClaimedMessage]:
        """Up to `limit` messages of `queue`, claimed. `channelled`: the queue
        has channels or limits (the controls say so); `ahead`: its channel read made
        ahead of this claim, if any (channels.read_ahead)."""
        if channelled:
            self.contended = False
            return await claim_channelled(
                self.driver,
                self.engine,
                queue,
                limit,
                channel_breakers=self.channel_breakers,
                ahead=ahead,
                on_contended=self._contended,
            )
        return await self.driver.claim(self.engine, queue, limit)

    def _contended(self) -> None:
        self.contended = True
