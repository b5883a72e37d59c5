"""Workers: the broker processes that registered, alive or gone."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from faststream_sqla.admin.workers import MIN_GONE_AFTER, PRUNE_AFTER

from ..models import WorkerBody, Workers
from .common import Admin

router = APIRouter(tags=["workers"])


@router.get("/workers")
async def list_workers(
    admin: Admin,
    gone_after: Annotated[float | None, Query(ge=MIN_GONE_AFTER, le=PRUNE_AFTER)] = None,
) -> Workers:
    """Every registered process, oldest start first: `alive`, or `gone` once silent for
    longer than `gone_after` seconds (default: each worker's three refresh intervals)."""
    found = await admin.workers(gone_after=gone_after)
    return Workers(workers=[WorkerBody.of(w) for w in found])
