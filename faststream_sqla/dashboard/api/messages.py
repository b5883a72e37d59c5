"""Messages: a queue's live messages page by page, one message in full, replay."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from faststream_sqla.exceptions import InvalidOptionError

from ..models import (
    MAX_MESSAGE_ID,
    MAX_TEXT,
    MessageDetail,
    MessageRow,
    MessageRows,
    MoveAnswer,
    ReplayRequest,
)
from .common import CHANGES, Admin, Limit, QueueName

router = APIRouter(tags=["messages"])

Filter = Annotated[str | None, Query(min_length=1, max_length=MAX_TEXT)]


@router.get("/queues/{queue}/messages")
async def list_messages(
    queue: QueueName,
    admin: Admin,
    state: Annotated[list[str] | None, Query(max_length=5)] = None,
    channel: Filter = None,
    ordering_key: Filter = None,
    correlation_id: Filter = None,
    before: Annotated[str | None, Query(max_length=40)] = None,
    limit: Limit = 50,
) -> MessageRows:
    """The queue's live messages, newest first: `state` (ready, scheduled, retrying,
    processing, waiting; repeat it for several), `channel`, `ordering_key` and
    `correlation_id` filter them; pass a page's `next_page` as `before` for the next.
    A page looks at 10,000 messages at most, so with a rare filter a page may be short
    (or empty) and still have a `next_page`."""
    page = await admin.messages(
        queue,
        states=state,
        limit=limit,
        after=before,
        channel=channel,
        ordering_key=ordering_key,
        correlation_id=correlation_id,
        newest_first=True,
    )
    return MessageRows(items=[MessageRow.of(m) for m in page.items], next_page=page.next_page)


@router.get("/messages/{message_id}")
async def message_detail(
    message_id: Annotated[int, Path(ge=1, le=MAX_MESSAGE_ID)], admin: Admin
) -> MessageDetail:
    """One message, queued or archived: headers, body, attempts, last error, saved
    state, channel, keys, and where a redrive or replay took it from or to."""
    return MessageDetail.of(await admin.inspect(message_id))


@router.post("/messages/replay", dependencies=CHANGES)
async def replay(body: ReplayRequest, admin: Admin) -> MoveAnswer:
    """Archived messages in any final state (or `states`) back to their queues as new
    messages: by `ids`, or by a filter (`queue` or `all`, `error`, `since`, `until`),
    which first answers with the number it would move unless `confirm` is true."""
    if body.ids is not None:
        if body.queue is not None or body.all or body.error is not None:
            raise InvalidOptionError("a replay takes ids or a filter, not both")
        if body.since or body.until:
            raise InvalidOptionError("a replay by ids takes no time range")
        return MoveAnswer.done(await admin.replay(ids=body.ids, states=body.states))
    if not body.confirm:
        count = await admin.replay_count(
            queue=body.queue,
            all_queues=body.all,
            since=body.since,
            until=body.until,
            states=body.states,
            error=body.error,
        )
        return MoveAnswer.preview(count)
    result = await admin.replay(
        queue=body.queue,
        all_queues=body.all,
        since=body.since,
        until=body.until,
        states=body.states,
        error=body.error,
    )
    return MoveAnswer.done(result)
