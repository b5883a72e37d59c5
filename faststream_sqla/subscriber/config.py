"""Subscriber options, with defaults that are fast and safe without tuning."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faststream._internal.configs import (
    SubscriberSpecificationConfig,
    SubscriberUsecaseConfig,
)
from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy

from faststream_sqla.broker_config import SqlaBrokerConfig
from faststream_sqla.exceptions import InvalidOptionError, require_whole, shown
from faststream_sqla.retry import ExponentialBackoffWithJitterRetryStrategy, RetryStrategy
from faststream_sqla.subscriber.claim_size import buffer_capacity

if TYPE_CHECKING:
    from faststream._internal.types import BrokerMiddleware


def default_retry_strategy() -> RetryStrategy:
    return ExponentialBackoffWithJitterRetryStrategy(
        initial_delay_seconds=1.0, max_delay_seconds=300.0, max_attempts=5
    )


#: max_fetch_batch_size when none is given: the largest claim the benchmarks measured
#: (docs/benchmarks.md#claim-size), and with the default overfetch a bound of 2,000
#: buffered messages
DEFAULT_LARGEST_CLAIM = 1000


#: bounds of the options (see ConsumeOptions.__post_init__ and docs/configuration.md)
MAX_WORKERS = 10_000
MAX_CLAIM = 100_000
MAX_DELIVERIES = 1_000_000
MAX_OVERFETCH = 100
HOUR, DAY = 3600.0, 86400.0
MAX_BREAKER_THRESHOLD = 1_000_000


@dataclass(kw_only=True)
class ConsumeOptions:
    """How a subscriber claims, runs and settles messages. See docs/configuration.md."""

    max_workers: int = 1
    retry_strategy: RetryStrategy = field(default_factory=default_retry_strategy)
    max_deliveries: int | None = None
    fetch_batch_size: int = 100
    max_fetch_batch_size: int | None = None
    overfetch_factor: float = 2.0
    min_fetch_interval: float = 0.0
    max_fetch_interval: float = 1.0
    flush_interval: float = 0.05
    release_stuck_interval: float = 10.0
    release_stuck_timeout: float = 30.0
    #: exception types that send a message straight to FAILED, with no more retries
    permanent_exceptions: tuple[type[BaseException], ...] = ()
    #: a handler running longer is cancelled and its attempt failed (None: no limit)
    handler_timeout: float | None = None
    #: consecutive failed attempts that open the queue's circuit breaker (None: none)
    circuit_breaker_threshold: int | None = None
    #: seconds an open breaker lets no claim through before one probe
    circuit_breaker_cooldown: float = 30.0
    #: each channel has its own breaker (the queue's counts messages without one)
    circuit_breaker_per_channel: bool = False

    def __post_init__(self) -> None:

        # Every option has bounds: a value that cannot work (a claim size past the
        # database's integers, a busy-looping interval, a lease of centuries) fails here,
        # when the subscriber is built, not in every claim later.
        def seconds(
            name: str, value: object, low: float, high: float, *, above: bool = False
        ) -> None:
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and (value > low if above else value >= low)
                and value <= high
            )
            if not ok:
                bound = f"more than {low:g}" if above else f"at least {low:g}"
                msg = f"{name} must be {bound} and at most {high:g} seconds, got {shown(value)}"
                raise InvalidOptionError(msg)

        require_whole("max_workers", self.max_workers, MAX_WORKERS)
        require_whole("fetch_batch_size", self.fetch_batch_size, MAX_CLAIM)
        if self.max_fetch_batch_size is not None:
            require_whole("max_fetch_batch_size", self.max_fetch_batch_size, MAX_CLAIM)
            if self.max_fetch_batch_size < self.fetch_batch_size:
                msg = (
                    f"max_fetch_batch_size ({self.max_fetch_batch_size}) must not be "
                    f"less than fetch_batch_size ({self.fetch_batch_size})"
                )
                raise InvalidOptionError(msg)
        if self.max_deliveries is not None:
            require_whole("max_deliveries", self.max_deliveries, MAX_DELIVERIES)
        if not isinstance(self.retry_strategy, RetryStrategy):
            msg = f"retry_strategy must be a RetryStrategy, got {shown(self.retry_strategy)}"
            raise InvalidOptionError(msg)
        factor = self.overfetch_factor
        if (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not (1 <= factor <= MAX_OVERFETCH)
        ):
            msg = (
                f"overfetch_factor must be a number from 1 to {MAX_OVERFETCH}, got {shown(factor)}"
            )
            raise InvalidOptionError(msg)
        seconds("min_fetch_interval", self.min_fetch_interval, 0, HOUR)
        seconds("max_fetch_interval", self.max_fetch_interval, 0, HOUR, above=True)
        if self.min_fetch_interval > self.max_fetch_interval:
            msg = (
                f"min_fetch_interval ({self.min_fetch_interval}) must not exceed "
                f"max_fetch_interval ({self.max_fetch_interval})"
            )
            raise InvalidOptionError(msg)
        seconds("flush_interval", self.flush_interval, 0, 60)
        seconds("release_stuck_interval", self.release_stuck_interval, 0.01, DAY)
        seconds("release_stuck_timeout", self.release_stuck_timeout, 0.1, 7 * DAY)
        if self.handler_timeout is not None:
            seconds("handler_timeout", self.handler_timeout, 0, 7 * DAY, above=True)
        if self.circuit_breaker_threshold is not None:
            require_whole(
                "circuit_breaker_threshold", self.circuit_breaker_threshold, MAX_BREAKER_THRESHOLD
            )
        seconds("circuit_breaker_cooldown", self.circuit_breaker_cooldown, 0.1, DAY)
        if not isinstance(self.circuit_breaker_per_channel, bool):
            raise InvalidOptionError(
                "circuit_breaker_per_channel must be True or False, got "
                f"{shown(self.circuit_breaker_per_channel)}"
            )
        if self.circuit_breaker_per_channel and self.circuit_breaker_threshold is None:
            raise InvalidOptionError(
                "circuit_breaker_per_channel needs circuit_breaker_threshold: the "
                "failures that open each channel's breaker"
            )
        if not isinstance(self.permanent_exceptions, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in self.permanent_exceptions
        ):
            msg = (
                "permanent_exceptions must be a tuple of exception classes, "
                f"got {shown(self.permanent_exceptions)}"
            )
            raise InvalidOptionError(msg)

    @property
    def largest_claim(self) -> int:
        """The largest claim the fetcher grows to (see subscriber/claim_size.py)."""
        if self.max_fetch_batch_size is None:
            return max(DEFAULT_LARGEST_CLAIM, self.fetch_batch_size)
        return self.max_fetch_batch_size

    @property
    def buffer_capacity(self) -> int:
        """The prefetch buffer's capacity at the smallest claim."""
        return buffer_capacity(self.fetch_batch_size, self.overfetch_factor)

    @property
    def largest_buffer_capacity(self) -> int:
        """The prefetch buffer's capacity at the largest claim: its bound."""
        return buffer_capacity(self.largest_claim, self.overfetch_factor)


@dataclass(kw_only=True)
class SqlaSubscriberSpecificationConfig(SubscriberSpecificationConfig):
    queues: tuple[str, ...]
    topics: tuple[str, ...] = ()


@dataclass(kw_only=True)
class SqlaSubscriberConfig(SubscriberUsecaseConfig):
    _outer_config: SqlaBrokerConfig = field(default_factory=SqlaBrokerConfig)
    queues: tuple[str, ...]
    options: ConsumeOptions
    #: topic patterns each of the queues is bound to when the broker starts
    topics: tuple[str, ...] = ()
    batch: bool = False
    middlewares: Sequence[BrokerMiddleware[Any]] = ()

    @property
    def ack_policy(self) -> AckPolicy:
        if self._ack_policy is EMPTY:
            if self._outer_config.ack_policy is not EMPTY:
                return self._outer_config.ack_policy
            # Failures are retried under the retry strategy, then end FAILED with their
            # error: a production queue should neither drop nor loop on them silently.
            return AckPolicy.NACK_ON_ERROR
        return self._ack_policy
