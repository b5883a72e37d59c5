"""The pages: each reads through the JSON API's own routes (the same admin calls and
read models) and fills in a template. Changes are made by the pages' buttons calling
the JSON API (htmx), so the checks of a change live in one place."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH

from ..api import breakers, channels, dead_letters, messages, queues, schedules, workers
from ..api.common import Admin, QueueName
from ..models import MAX_MESSAGE_ID, MAX_TEXT, ReplicaBanner, ThroughputBody
from .access import page_access
from .templating import render

router = APIRouter(dependencies=[Depends(page_access)], include_in_schema=False)

Text = Annotated[str | None, Query(max_length=MAX_TEXT)]
QueueFilter = Annotated[str | None, Query(max_length=MAX_QUEUE_NAME_LENGTH)]
#: the live message states a filter takes
STATES = ("ready", "scheduled", "retrying", "processing", "waiting")


def _given(value: str | None) -> str | None:
    """An empty form field is no filter."""
    return value or None


async def _banner(admin: Admin) -> ReplicaBanner | None:
    return ReplicaBanner.of(await admin.replica_lag())


@router.get("/")
async def overview(request: Request, admin: Admin) -> Response:
    listed = await queues.list_queues(admin)
    # the last hour of each queue, for its sparkline
    names = [q.queue for q in listed.queues]
    hours = {t.queue: ThroughputBody.of(t) for t in await admin.throughputs(names)}
    return render(
        request, "overview.html", queues=listed.queues, hours=hours, replica=listed.replica
    )


@router.get("/queues/{queue}")
async def queue_page(request: Request, queue: QueueName, admin: Admin) -> Response:
    listed = await queues.list_queues(admin)
    found = next((q for q in listed.queues if q.queue == queue), None)
    recent = await messages.list_messages(queue, admin, limit=20)
    return render(
        request,
        "queue.html",
        queue=queue,
        overview=found,
        messages=recent.items,
        replica=listed.replica,
    )


@router.get("/messages")
async def messages_page(
    request: Request,
    admin: Admin,
    queue: QueueFilter = None,
    state: Annotated[str | None, Query(max_length=20)] = None,
    channel: Text = None,
    ordering_key: Text = None,
    correlation_id: Text = None,
    before: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    """A queue's live messages with the API's filters; without a queue, the form."""
    filters = {
        "queue": queue or "",
        "state": state or "",
        "channel": channel or "",
        "ordering_key": ordering_key or "",
        "correlation_id": correlation_id or "",
    }
    page = None
    if queue:
        page = await messages.list_messages(
            queue,
            admin,
            state=[state] if state else None,
            channel=_given(channel),
            ordering_key=_given(ordering_key),
            correlation_id=_given(correlation_id),
            before=_given(before),
            limit=50,
        )
    known = [q.queue for q in (await queues.list_queues(admin)).queues]
    return render(
        request,
        "messages.html",
        filters=filters,
        page=page,
        states=STATES,
        known_queues=known,
        replica=await _banner(admin),
    )


@router.get("/messages/{message_id}")
async def message_page(
    request: Request,
    message_id: Annotated[int, Path(ge=1, le=MAX_MESSAGE_ID)],
    admin: Admin,
) -> Response:
    found = await messages.message_detail(message_id, admin)
    return render(request, "message.html", message=found, replica=await _banner(admin))


@router.get("/dead-letters")
async def dead_letters_page(
    request: Request, admin: Admin, queue: QueueFilter = None, error: Text = None
) -> Response:
    """Dead letters grouped by queue and common error, and the rows the filter keeps."""
    summary = await dead_letters.dead_letter_summary(admin, queue=_given(queue))
    rows = await dead_letters.list_dead_letters(
        admin, queue=_given(queue), error=_given(error), limit=100
    )
    return render(
        request,
        "dead_letters.html",
        summary=summary.queues,
        rows=rows.items,
        filters={"queue": queue or "", "error": error or ""},
        replica=await _banner(admin),
    )


@router.get("/channels")
async def channels_page(request: Request, admin: Admin, queue: QueueFilter = None) -> Response:
    """Each queue's channels (or one queue's): in flight against limits, editable."""
    names = [queue] if queue else [q.queue for q in (await queues.list_queues(admin)).queues]
    listed = [await channels.list_channels(name, admin) for name in names]
    return render(request, "channels.html", listed=listed, replica=await _banner(admin))


@router.get("/breakers")
async def breakers_page(request: Request, admin: Admin) -> Response:
    found = await breakers.list_breakers(admin)
    return render(request, "breakers.html", breakers=found.breakers, replica=await _banner(admin))


@router.get("/schedules")
async def schedules_page(request: Request, admin: Admin) -> Response:
    found = await schedules.list_schedules(admin)
    return render(
        request, "schedules.html", schedules=found.schedules, replica=await _banner(admin)
    )


@router.get("/workers")
async def workers_page(request: Request, admin: Admin) -> Response:
    found = await workers.list_workers(admin)
    return render(request, "workers.html", workers=found.workers, replica=await _banner(admin))
