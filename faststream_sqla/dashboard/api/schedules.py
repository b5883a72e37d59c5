"""Schedules: every schedule; pause and resume one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from ..models import MAX_TEXT, ScheduleBody, Schedules
from .common import CHANGES, Admin

router = APIRouter(tags=["schedules"])

ScheduleName = Annotated[str, Path(min_length=1, max_length=MAX_TEXT)]


@router.get("/schedules")
async def list_schedules(admin: Admin) -> Schedules:
    return Schedules(schedules=[ScheduleBody.of(s) for s in await admin.schedules()])


@router.post("/schedules/{name}/pause", dependencies=CHANGES)
async def pause_schedule(name: ScheduleName, admin: Admin) -> ScheduleBody:
    """Stop firing the schedule until resumed (survives restarts)."""
    return ScheduleBody.of(await admin.pause_schedule(name))


@router.post("/schedules/{name}/resume", dependencies=CHANGES)
async def resume_schedule(name: ScheduleName, admin: Admin) -> ScheduleBody:
    return ScheduleBody.of(await admin.resume_schedule(name))
