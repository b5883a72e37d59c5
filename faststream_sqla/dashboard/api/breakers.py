"""Circuit breakers: their states and recent changes; a manual reset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH

from ..models import MAX_TEXT, BreakerBody, Breakers, Changed
from .common import CHANGES, Admin, QueueName

router = APIRouter(tags=["breakers"])


@router.get("/breakers")
async def list_breakers(
    admin: Admin,
    queue: Annotated[str | None, Query(min_length=1, max_length=MAX_QUEUE_NAME_LENGTH)] = None,
) -> Breakers:
    """Every breaker that ever counted a failure (or one queue's), with its last changes."""
    return Breakers(breakers=[BreakerBody.of(b) for b in await admin.breakers(queue)])


@router.post("/queues/{queue}/breaker/reset", dependencies=CHANGES)
async def reset_breaker(
    queue: QueueName,
    admin: Admin,
    channel: Annotated[str | None, Query(min_length=1, max_length=MAX_TEXT)] = None,
) -> Changed:
    """Close the queue's breaker (or its `channel`'s own) and forget its failures."""
    return Changed(changed=await admin.reset_breaker(queue, channel=channel))
