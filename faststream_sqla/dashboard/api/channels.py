"""Channels and limits: a queue's channels with their limits; set limits; pause and
resume a channel. A channel is a query parameter: group names end with "/"."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..models import (
    Changed,
    ChannelRow,
    Channels,
    LimitsRequest,
    QueueLimitsBody,
    QueueLimitsRequest,
)
from .common import CHANGES, Admin, Channel, QueueName

router = APIRouter(tags=["channels"])


def _given(body: LimitsRequest) -> dict[str, Any]:
    """The fields the request named: the others stay as they are (null removes)."""
    return {name: getattr(body, name) for name in body.model_fields_set}


@router.get("/queues/{queue}/channels")
async def list_channels(queue: QueueName, admin: Admin) -> Channels:
    """The queue's limits and each of its channels: messages ready, in flight and
    later, paused, its own limits and those that apply."""
    limits = await admin.queue_limits(queue)
    found = await admin.channels(queue)
    return Channels(queue=QueueLimitsBody.of(limits), channels=[ChannelRow.of(c) for c in found])


@router.put("/queues/{queue}/limits", dependencies=CHANGES)
async def set_queue_limits(
    queue: QueueName, body: QueueLimitsRequest, admin: Admin
) -> QueueLimitsBody:
    """Set the queue's own limits and its defaults for its channels."""
    return QueueLimitsBody.of(await admin.set_queue_limits(queue, **_given(body)))


@router.put("/queues/{queue}/channels/limits", dependencies=CHANGES)
async def set_channel_limits(
    queue: QueueName, channel: Channel, body: LimitsRequest, admin: Admin
) -> ChannelRow:
    """Set one channel's own limits, which take the place of the queue's defaults."""
    return ChannelRow.of(await admin.set_channel_limits(queue, channel, **_given(body)))


@router.post("/queues/{queue}/channels/pause", dependencies=CHANGES)
async def pause_channel(queue: QueueName, channel: Channel, admin: Admin) -> Changed:
    return Changed(changed=await admin.pause_channel(queue, channel))


@router.post("/queues/{queue}/channels/resume", dependencies=CHANGES)
async def resume_channel(queue: QueueName, channel: Channel, admin: Admin) -> Changed:
    return Changed(changed=await admin.resume_channel(queue, channel))
