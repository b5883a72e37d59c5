"""Setting the limits of queues and channels (the controls table).

Every change also counts up the queue row's version, in the same transaction: a
channel claim that read the old limits then writes nothing and reads again
(channels.claim), so the next claim in any process applies the change.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.options import checked_key
from faststream_sqla.schema import WHOLE_QUEUE, validate_queue_name

from .limits import LimitsWrite, Rate, checked_concurrency, checked_rate

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.drivers import Driver


class _Unset(enum.Enum):
    UNSET = "unset"


#: a limit left as it is (None removes one)
UNSET = _Unset.UNSET


@dataclass(frozen=True)
class LimitChange:
    """What one call changes in a control row; UNSET leaves a value as it is."""

    max_concurrency: int | _Unset | None = UNSET
    rate: Rate | _Unset | None = UNSET
    channel_max_concurrency: int | _Unset | None = UNSET
    channel_rate: Rate | _Unset | None = UNSET
    paused: bool | _Unset = UNSET

    def values(self) -> dict[str, Any]:
        """The columns this change sets. A rate's window (rate_slot, rate_counts) is left
        as it is: one counted in another period's slots is discarded when next read
        (channels.rate.window_at), and one of the same period still counts claims that
        really started."""
        values: dict[str, Any] = {}
        if self.max_concurrency is not UNSET:
            values["max_concurrency"] = self.max_concurrency
        if self.rate is not UNSET:
            values.update(_rate_columns("rate", self.rate))
        if self.channel_max_concurrency is not UNSET:
            values["channel_max_concurrency"] = self.channel_max_concurrency
        if self.channel_rate is not UNSET:
            values.update(_rate_columns("channel_rate", self.channel_rate))
        if self.paused is not UNSET:
            values["paused"] = self.paused
        return values


def _rate_columns(prefix: str, rate: Rate | None) -> dict[str, Any]:
    """A rate as its two columns, `{prefix}_count` and `{prefix}_period`; None removes it."""
    return {
        f"{prefix}_count": None if rate is None else rate.count,
        f"{prefix}_period": None if rate is None else rate.period,
    }


#: what a missing control row stands for: no limits, not paused
ROW_DEFAULTS: dict[str, Any] = {
    "max_concurrency": None,
    "rate_count": None,
    "rate_period": None,
    "channel_max_concurrency": None,
    "channel_rate_count": None,
    "channel_rate_period": None,
    "paused": False,
}


def _same(stored: Any, wanted: Any) -> bool:
    # MySQL's FLOAT keeps a period to single precision: 0.1 reads back as 0.100000001
    if isinstance(stored, float) and isinstance(wanted, float):
        return math.isclose(stored, wanted, rel_tol=1e-6)
    if isinstance(wanted, bool):
        return bool(stored) is wanted
    return bool(stored == wanted)


def checked_channel(channel: object) -> str:
    """A channel's name as a message carries it (WHOLE_QUEUE, "", for the queue)."""
    if channel == WHOLE_QUEUE:
        return WHOLE_QUEUE
    name = checked_key(channel, "channel")
    assert name is not None
    return name


def limit_change(
    *,
    channel: str,
    max_concurrency: object = UNSET,
    rate: object = UNSET,
    channel_max_concurrency: object = UNSET,
    channel_rate: object = UNSET,
    paused: object = UNSET,
) -> LimitChange:
    """The checked change of one row; raises InvalidOptionError before any write."""
    if channel != WHOLE_QUEUE and (
        channel_max_concurrency is not UNSET or channel_rate is not UNSET
    ):
        msg = (
            "channel_max_concurrency and channel_rate are a queue's defaults for its "
            "channels; set max_concurrency and rate on a channel"
        )
        raise InvalidOptionError(msg)
    if paused is not UNSET and not isinstance(paused, bool):
        msg = f"paused must be True or False, got {shown(paused)}"
        raise InvalidOptionError(msg)
    return LimitChange(
        max_concurrency=UNSET if max_concurrency is UNSET else checked_concurrency(max_concurrency),
        rate=UNSET if rate is UNSET else checked_rate(rate),
        channel_max_concurrency=UNSET
        if channel_max_concurrency is UNSET
        else checked_concurrency(channel_max_concurrency, "channel_max_concurrency"),
        channel_rate=UNSET if channel_rate is UNSET else checked_rate(channel_rate),
        paused=paused,
    )


def _limits_write(queue: str, channel: str, change: LimitChange) -> LimitsWrite:
    validate_queue_name(queue)
    channel = checked_channel(channel)
    wanted = change.values()

    def differing(stored: Mapping[str, Any] | None) -> dict[str, Any]:
        current = ROW_DEFAULTS if stored is None else stored
        return {k: v for k, v in wanted.items() if not _same(current[k], v)}

    return LimitsWrite(queue, channel, wanted, differing)


async def change_row(
    driver: Driver, engine: AsyncEngine, queue: str, channel: str, change: LimitChange
) -> bool:
    """Apply `change` to the row of (queue, channel), creating the queue's row if
    missing; whether any setting changed. Only the values that differ are written, and
    a channel's row is created only to hold a setting: resuming a channel never paused,
    or removing a limit it never had, leaves no row behind. The statements are the
    driver's (ChannelClaim.write_limits)."""
    return await driver.channel_claim.write_limits(engine, _limits_write(queue, channel, change))


async def change_row_in(
    driver: Driver, conn: AsyncConnection, queue: str, channel: str, change: LimitChange
) -> bool:
    """`change_row` in `conn`, a channel transaction (Driver.channel_transaction) whose
    other changes commit with it: an endpoint's row and its channel's pause."""
    return await driver.channel_claim.write_limits_in(conn, _limits_write(queue, channel, change))


async def set_limits(
    driver: Driver,
    engine: AsyncEngine,
    queue: str,
    channel: str = WHOLE_QUEUE,
    **limits: object,
) -> bool:
    """Set a channel's limits, or with channel "" the queue's (max_concurrency and
    rate for the whole queue, channel_max_concurrency and channel_rate for each of its
    channels without limits of its own); None removes a limit. Whether anything
    changed."""
    return await change_row(driver, engine, queue, channel, limit_change(channel=channel, **limits))


__all__ = [
    "ROW_DEFAULTS",
    "UNSET",
    "LimitChange",
    "change_row",
    "change_row_in",
    "checked_channel",
    "limit_change",
    "set_limits",
]
