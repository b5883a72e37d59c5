"""The limits of queues and channels, for operators: reading them with what each
channel has waiting and in flight, and changing them (through channels.store, which
counts the queue row's version up so that no claim applies limits older than the
change; faststream_sqla.channels enforces them)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.channels.groups import group_of, is_group
from faststream_sqla.channels.limits import Rate
from faststream_sqla.channels.store import (
    UNSET,
    LimitChange,
    change_row,
    checked_channel,
    limit_change,
)
from faststream_sqla.drivers.controls import channel_limits_rows, queue_limits_row
from faststream_sqla.drivers.ranges import ChannelCounts, channel_counts
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import WHOLE_QUEUE, QueueTables

from .models import ChannelStatus, QueueLimits

if TYPE_CHECKING:
    from faststream_sqla.drivers import Driver


def channel_name(value: object) -> str:
    """A channel's name as messages carry it (the queue's own row, "", is not one)."""
    if value == WHOLE_QUEUE or value is None:
        msg = (
            f"a channel's name must be 1 or more characters, got {shown(value)} (the queue's "
            "own limits: set_queue_limits, faststream-sqla queue limit)"
        )
        raise InvalidOptionError(msg)
    return checked_channel(value)


def _rate(count: int | None, period: float | None) -> Rate | None:
    if count is None or period is None:
        return None
    # six significant digits: MySQL's FLOAT reads 0.1 back as 0.100000001
    return Rate(count, float(f"{period:.6g}"))


# -- reading ---------------------------------------------------------------------------


async def queue_limits(conn: AsyncConnection, tables: QueueTables, queue: str) -> QueueLimits:
    """The queue's own limits and its channels' defaults (none without a row)."""
    row = await queue_limits_row(conn, tables, queue)
    if row is None:
        return QueueLimits(queue, None, None, None, None, paused=False)
    return QueueLimits(
        queue=queue,
        max_concurrency=row.max_concurrency,
        rate=_rate(row.rate_count, row.rate_period),
        channel_max_concurrency=row.channel_max_concurrency,
        channel_rate=_rate(row.channel_rate_count, row.channel_rate_period),
        paused=row.paused,
    )


def _group_counts(counts: ChannelCounts, groups: Iterable[str]) -> ChannelCounts:
    """The (ready, in flight, later) of each of `groups`, summed over its channels."""
    summed: ChannelCounts = {}
    for group in groups:
        totals = [0, 0, 0]
        for channel, figures in counts.items():
            if group_of(channel) == group:
                for i, n in enumerate(figures):
                    totals[i] += n
        summed[group] = totals
    return summed


def _defaults_for(name: str, defaults: QueueLimits) -> tuple[int | None, Rate | None]:
    """The queue's defaults that apply to `name`: a group's row has its own limits
    only, the defaults are for channels."""
    if is_group(name):
        return None, None
    return defaults.channel_max_concurrency, defaults.channel_rate


async def channel_statuses(
    conn: AsyncConnection, tables: QueueTables, queue: str, only: str | None = None
) -> list[ChannelStatus]:
    """Every channel of `queue` (or only the channel `only`) with a control row or
    live messages, by name."""
    defaults = await queue_limits(conn, tables, queue)
    rows = {row.channel: row for row in await channel_limits_rows(conn, tables, queue, only)}
    if only is not None and is_group(only):
        # a group's figures are its channels' together
        counts = _group_counts(await channel_counts(conn, tables, queue, None), [only])
    else:
        counts = await channel_counts(conn, tables, queue, only)
        counts.update(_group_counts(counts, filter(is_group, rows)))
    statuses = []
    for name in sorted(rows.keys() | counts.keys()):
        row = rows.get(name)
        ready, in_flight, later = counts.get(name, (0, 0, 0))
        own_max = None if row is None else row.max_concurrency
        own_rate = None if row is None else _rate(row.rate_count, row.rate_period)
        default_max, default_rate = _defaults_for(name, defaults)
        statuses.append(
            ChannelStatus(
                name=name,
                ready=ready,
                in_flight=in_flight,
                later=later,
                paused=row is not None and row.paused,
                max_concurrency=own_max,
                rate=own_rate,
                effective_max_concurrency=own_max if own_max is not None else default_max,
                effective_rate=own_rate if own_rate is not None else default_rate,
                group=group_of(name),
            )
        )
    return statuses


async def channel_status(
    conn: AsyncConnection, tables: QueueTables, queue: str, channel: str
) -> ChannelStatus:
    """One channel, as `channel_statuses` shows it (no limits and no messages when it
    has neither)."""
    for found in await channel_statuses(conn, tables, queue, only=channel):
        return found
    default_max, default_rate = _defaults_for(channel, await queue_limits(conn, tables, queue))
    return ChannelStatus(
        name=channel,
        ready=0,
        in_flight=0,
        later=0,
        paused=False,
        max_concurrency=None,
        rate=None,
        effective_max_concurrency=default_max,
        effective_rate=default_rate,
        group=group_of(channel),
    )


# -- changing --------------------------------------------------------------------------


def channel_change(channel: str, *, max_concurrency: object, rate: object) -> LimitChange:
    """A channel's new limits, checked (InvalidOptionError) before anything is written."""
    if max_concurrency is UNSET and rate is UNSET:
        raise InvalidOptionError(
            "nothing to set: give max_concurrency and/or rate (None removes a limit)"
        )
    return limit_change(channel=channel, max_concurrency=max_concurrency, rate=rate)


def queue_change(
    *,
    max_concurrency: object,
    rate: object,
    channel_max_concurrency: object,
    channel_rate: object,
) -> LimitChange:
    """A queue's new limits and channel defaults, checked before anything is written."""
    if all(
        value is UNSET for value in (max_concurrency, rate, channel_max_concurrency, channel_rate)
    ):
        raise InvalidOptionError(
            "nothing to set: give max_concurrency, rate, channel_max_concurrency and/or "
            "channel_rate (None removes a limit)"
        )
    return limit_change(
        channel=WHOLE_QUEUE,
        max_concurrency=max_concurrency,
        rate=rate,
        channel_max_concurrency=channel_max_concurrency,
        channel_rate=channel_rate,
    )


async def set_limits(
    driver: Driver, engine: AsyncEngine, queue: str, channel: str, limits: LimitChange
) -> bool:
    """Write a checked change of a channel's row ("": the queue's); whether it changed
    anything. Every process's next channel claim of the queue applies it."""
    return await change_row(driver, engine, queue, channel, limits)


async def set_channel_paused(
    driver: Driver, engine: AsyncEngine, queue: str, channel: str, paused: bool
) -> bool:
    """Pause or resume one channel; whether it was the other way before."""
    return await change_row(driver, engine, queue, channel, LimitChange(paused=paused))
