"""Channels: per-channel and per-queue concurrency and rate limits, enforced by the
claim in the database, and a fair rotation among a queue's channels.

A message published with `channel="acme"` is claimed only by the channel claim
(`claim.claim_channelled`), which counts what each channel has in flight, consults
its rate window and takes turns among the channels, then writes only if no other
claim or change of limits came between (a version on the queue's control row).
Limits live in the controls table and change at run time (`faststream_sqla.admin`,
`faststream-sqla channel set`).
"""

from .limits import (
    MAX_CONCURRENCY_LIMIT,
    MAX_RATE_COUNT,
    MAX_RATE_PERIOD,
    MIN_RATE_PERIOD,
    Rate,
    checked_concurrency,
    checked_rate,
)

__all__ = [
    "MAX_CONCURRENCY_LIMIT",
    "MAX_RATE_COUNT",
    "MAX_RATE_PERIOD",
    "MIN_RATE_PERIOD",
    "Rate",
    "checked_concurrency",
    "checked_rate",
]
