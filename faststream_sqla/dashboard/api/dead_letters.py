"""Dead letters: pages, a summary per queue, redrive."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH

from ..models import (
    MAX_TEXT,
    DeadLetterQueueSummary,
    DeadLetterRow,
    DeadLetterRows,
    DeadLetterSummaries,
    MoveAnswer,
    RedriveRequest,
)
from .common import CHANGES, Admin, Limit

router = APIRouter(tags=["dead letters"])

Queue = Annotated[str | None, Query(min_length=1, max_length=MAX_QUEUE_NAME_LENGTH)]


@router.get("/dead-letters")
async def list_dead_letters(
    admin: Admin,
    queue: Queue = None,
    error: Annotated[str | None, Query(min_length=1, max_length=MAX_TEXT)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after: Annotated[str | None, Query(max_length=100)] = None,
    limit: Limit = 50,
) -> DeadLetterRows:
    """FAILED and EXPIRED archived messages, newest first, each with its last error:
    of one `queue` (default all), whose last error starts with `error`, archived in
    [since, until); pass a page's `next_page` as `after` for the next."""
    page = await admin.dead_letters(
        queue=queue, since=since, until=until, limit=limit, after=after, error=error
    )
    return DeadLetterRows(items=[DeadLetterRow.of(d) for d in page.items], next_page=page.next_page)


@router.get("/dead-letters/summary")
async def dead_letter_summary(admin: Admin, queue: Queue = None) -> DeadLetterSummaries:
    """Per queue with dead letters: how many (capped), oldest, newest, common errors."""
    found = await admin.dead_letter_summary(queue=queue)
    return DeadLetterSummaries(queues=[DeadLetterQueueSummary.of(s) for s in found])


@router.post("/dead-letters/redrive", dependencies=CHANGES)
async def redrive(body: RedriveRequest, admin: Admin) -> MoveAnswer:
    """Dead letters back to their queues as new messages: by `ids`, or by a filter
    (`queue` or `all`, and `error`), which first answers with the number it would move
    unless `confirm` is true."""
    if body.ids is not None:
        if body.queue is not None or body.all or body.error is not None:
            raise InvalidOptionError("a redrive takes ids or a filter, not both")
        return MoveAnswer.done(await admin.redrive(ids=body.ids))
    if not body.confirm:
        count = await admin.redrive_count(queue=body.queue, all_queues=body.all, error=body.error)
        return MoveAnswer.preview(count)
    result = await admin.redrive(queue=body.queue, all_queues=body.all, error=body.error)
    return MoveAnswer.done(result)
