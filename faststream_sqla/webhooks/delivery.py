"""Webhook delivery: a subscriber of the delivery queue that POSTs each delivery to its
endpoint, signed, and settles it by the response (docs/webhooks.md).

Each endpoint's deliveries are its channel of the delivery queue, so its concurrency,
rate, pause and circuit breaker are the channel machinery's, across processes. Retries
are the endpoint's schedule, given to the broker as RetryAfter; a delivery that must
not be retried raises DeliveryRefused, a permanent error, and is dead-lettered with
the reason. Every HTTP attempt is recorded (drivers.endpoints.record_attempts),
gathered and written in one INSERT per flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, ClassVar

from faststream import AckPolicy

from faststream_sqla.admin.endpoints import set_endpoint_disabled
from faststream_sqla.annotations import SqlaMessage
from faststream_sqla.drivers import endpoints as store
from faststream_sqla.drivers.base import reading
from faststream_sqla.endpoints import DEFAULT_RETRY_SCHEDULE, check_address
from faststream_sqla.exceptions import (
    InvalidEndpointError,
    InvalidOptionError,
    RetryAfter,
    UnresolvedHostError,
    shown,
)
from faststream_sqla.retry import ConstantRetryStrategy
from faststream_sqla.schema import DELIVERY_QUEUE, KEPT_RESPONSE_LENGTH, WEBHOOK_ID_HEADER

from .signing import signed_headers

if TYPE_CHECKING:
    import httpx

    from faststream_sqla.broker.broker import SqlaBroker

#: the longest a Retry-After is honoured for
MAX_RETRY_AFTER = 24 * 3600.0
#: seconds between two writes of the gathered attempts
ATTEMPT_FLUSH_INTERVAL = 0.05
#: seconds a delivery waits, uncounted, while its endpoint is disabled and its channel
#: pause has not reached this process yet
DISABLED_WAIT = 5.0

log = logging.getLogger("faststream_sqla.webhooks")


def _utc_naive() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # stored times are naive UTC


class DeliveryRefused(Exception):
    """A delivery that is not retried: a 4xx response, an endpoint that is gone or
    refused, or the retries spent. Recorded as the dead letter's error."""

    #: logged as one line: the traceback would show only this module
    handler_log_level: ClassVar[int] = logging.ERROR


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header's wait in seconds (delta-seconds or an HTTP date), capped
    at MAX_RETRY_AFTER; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), MAX_RETRY_AFTER)


def decide(status: int | None, retry_after: str | None) -> str:
    """What a response means: "delivered", "gone" (410: disable the endpoint),
    "wait" (429 or 503 with a Retry-After), "retry" (no response, 5xx, 3xx, 429
    without a wait) or "refused" (any other 4xx)."""
    if status is None:
        return "retry"
    if 200 <= status < 300:
        return "delivered"
    if status == 410:
        return "gone"
    if status in (429, 503) and retry_after_seconds(retry_after) is not None:
        return "wait"
    if status == 429 or status >= 500 or 300 <= status < 400:
        return "retry"
    return "refused"


class WebhookDelivery:
    """Deliver the broker's webhooks (docs/webhooks.md): declare it on a SqlaBroker
    before the broker starts, and the broker's next start delivers, its stop closes
    the HTTP client and writes the last attempts.

    Args:
        broker: the broker whose database holds the endpoints.
        max_workers: deliveries in flight at once in this process (1 to 1,000).
        breaker_threshold: consecutive failed attempts of one endpoint after which
            no process delivers to it for `breaker_cooldown` seconds, then one probe
            decides (None: no breaker).
        breaker_cooldown: seconds an endpoint's open breaker waits.
        endpoint_refresh: seconds an endpoint's settings are kept before they are read
            again: how soon a change (a rotation, a new URL) reaches this process.
        release_stuck_timeout: seconds after which a delivery held by a process that
            died is delivered again by another (live processes renew their claims).
    """

    def __init__(
        self,
        broker: SqlaBroker,
        *,
        max_workers: int = 32,
        breaker_threshold: int | None = 10,
        breaker_cooldown: float = 60.0,
        endpoint_refresh: float = 2.0,
        release_stuck_timeout: float = 30.0,
    ) -> None:
        try:
            import httpx  # noqa: F401 - only to fail here, with the fix, when missing
        except ImportError:
            msg = "webhook delivery needs httpx: pip install 'faststream-sqla[webhooks]'"
            raise InvalidOptionError(msg) from None
        if (
            isinstance(max_workers, bool)
            or not isinstance(max_workers, int)
            or not 1 <= max_workers <= 1000
        ):
            raise InvalidOptionError(f"max_workers must be 1 to 1000, got {shown(max_workers)}")
        if (
            isinstance(endpoint_refresh, bool)
            or not isinstance(endpoint_refresh, (int, float))
            or not math.isfinite(endpoint_refresh)
            or not 0 <= endpoint_refresh <= 300
        ):
            msg = f"endpoint_refresh must be 0 to 300 seconds, got {shown(endpoint_refresh)}"
            raise InvalidOptionError(msg)
        self.broker = broker
        self.max_workers = max_workers
        self.endpoint_refresh = float(endpoint_refresh)
        # by allow_private: only the endpoints that allow it skip the connect-time check
        self._clients: dict[bool, httpx.AsyncClient] = {}
        self._endpoints: dict[str, tuple[float, store.EndpointRow | None]] = {}
        self._attempts: list[store.AttemptRow] = []
        self._flusher: asyncio.Task[None] | None = None
        self._gone_logged: set[str] = set()
        subscriber = broker.subscriber(
            DELIVERY_QUEUE,
            max_workers=max_workers,
            # every retry's delay comes from the endpoint's schedule (RetryAfter)
            retry_strategy=ConstantRetryStrategy(delay_seconds=DEFAULT_RETRY_SCHEDULE[0]),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            permanent_exceptions=(DeliveryRefused,),
            circuit_breaker_threshold=breaker_threshold,
            circuit_breaker_cooldown=breaker_cooldown,
            circuit_breaker_per_channel=breaker_threshold is not None,
            release_stuck_timeout=release_stuck_timeout,
            release_stuck_interval=min(10.0, release_stuck_timeout / 3),
        )
        subscriber(self._deliver)
        broker.at_stop(self.close)

    # -- one delivery ----------------------------------------------------------------

    async def _deliver(self, msg: SqlaMessage) -> None:
        raw = msg.raw_message
        name = raw.channel or ""
        endpoint = await self._endpoint(name)
        if endpoint is None:
            raise DeliveryRefused(f"endpoint {name!r} does not exist (removed?)")
        if endpoint.disabled_at is not None:
            await msg.defer(DISABLED_WAIT)  # kept, uncounted, until it is enabled
            return
        attempt = raw.attempts_count + 1
        webhook_id = str(raw.headers.get(WEBHOOK_ID_HEADER) or f"msg_{raw.id}")
        body = bytes(raw.payload)
        secrets = [endpoint.secret]
        if endpoint.previous_secret is not None and (
            endpoint.previous_secret_until is None or endpoint.previous_secret_until > _utc_naive()
        ):
            secrets.append(endpoint.previous_secret)
        headers = {
            **(endpoint.headers or {}),
            "content-type": str(raw.headers.get("content-type") or "application/json"),
            **signed_headers(secrets, webhook_id, body),
        }
        client = self._http(endpoint.allow_private)
        started, at = time.monotonic(), _utc_naive()
        status: int | None = None
        error: str | None = None
        text: str | None = None
        retry_after: str | None = None
        refused = False
        try:
            # streamed, so an endpoint answering gigabytes costs no more than what is kept
            async with client.stream(
                "POST", endpoint.url, content=body, headers=headers, timeout=endpoint.timeout
            ) as response:
                status, retry_after = response.status_code, response.headers.get("retry-after")
                kept = bytearray()
                async for chunk in response.aiter_bytes():
                    kept += chunk
                    if len(kept) >= KEPT_RESPONSE_LENGTH:
                        break
        except Exception as e:
            import httpx

            if isinstance(e, httpx.TimeoutException):
                error = f"timed out after {endpoint.timeout:g} s ({type(e).__name__})"
            elif isinstance(e, InvalidEndpointError):
                # the host resolved to a private address at connect time
                error, refused = str(e), True
            else:
                error = f"{type(e).__name__}: {e}"[:1000]
            status = None  # a body cut off mid-way is a failed attempt, retried
        else:
            text = kept[:KEPT_RESPONSE_LENGTH].decode(response.encoding or "utf-8", "replace")
        latency = time.monotonic() - started
        self._record(store.AttemptRow(raw.id, name, attempt, at, status, latency, error, text))
        if refused:
            self._endpoints.pop(name, None)
            raise DeliveryRefused(error)
        verdict = decide(status, retry_after)
        what = error if status is None else f"HTTP {status}"
        if verdict == "delivered":
            return
        if verdict == "gone":
            await self._disable(name)
            await msg.defer(0.0)  # kept: the channel is paused now
            return
        if verdict == "refused":
            raise DeliveryRefused(f"{what} from endpoint {name!r}: {(text or '')[:200]}")
        schedule = (
            DEFAULT_RETRY_SCHEDULE
            if endpoint.retry_schedule is None
            else tuple(endpoint.retry_schedule)
        )
        if attempt > len(schedule):
            raise DeliveryRefused(
                f"{what} from endpoint {name!r} on attempt {attempt}, the last its retry "
                "schedule allows"
            )
        wait = retry_after_seconds(retry_after) if verdict == "wait" else None
        raise RetryAfter(schedule[attempt - 1] if wait is None else wait, f"{what} from {name!r}")

    async def _endpoint(self, name: str) -> store.EndpointRow | None:
        """The endpoint's row, read at most every `endpoint_refresh` seconds; its address
        is checked each time it is read."""
        now = time.monotonic()
        cached = self._endpoints.get(name)
        if cached is not None and now - cached[0] < self.endpoint_refresh:
            return cached[1]
        config = self.broker.config
        async with reading(config.engine) as conn:
            rows = await store.endpoint_rows(conn, config.driver.tables, [name])
        row = rows[0] if rows else None
        if row is not None:
            try:
                await check_address(row.url, allow_private=row.allow_private)
            except UnresolvedHostError:
                pass  # the request fails to connect, and is retried by the schedule
            except InvalidEndpointError as e:
                raise DeliveryRefused(str(e)) from None
        self._endpoints[name] = (now, row)
        return row

    async def _disable(self, name: str) -> None:
        config = self.broker.config
        await set_endpoint_disabled(
            config.driver, config.engine, name, "the endpoint answered 410 Gone"
        )
        self._endpoints.pop(name, None)
        if name not in self._gone_logged:
            self._gone_logged.add(name)
            log.warning("endpoint %r answered 410 Gone: disabled, its deliveries kept", name)

    def _http(self, allow_private: bool) -> httpx.AsyncClient:
        client = self._clients.get(allow_private)
        if client is None:
            import httpx

            from .guard import PublicOnlyTransport

            limits = httpx.Limits(
                max_connections=self.max_workers, max_keepalive_connections=self.max_workers
            )
            client = self._clients[allow_private] = httpx.AsyncClient(
                follow_redirects=False,
                limits=limits,
                transport=None if allow_private else PublicOnlyTransport(limits=limits),
            )
        return client

    # -- attempts --------------------------------------------------------------------

    def _record(self, attempt: store.AttemptRow) -> None:
        self._attempts.append(attempt)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(ATTEMPT_FLUSH_INTERVAL)
        await self.flush_attempts()

    async def flush_attempts(self) -> None:
        """Write the attempts gathered so far: one INSERT. A failure is logged and the
        attempts kept for the next write."""
        if not self._attempts:
            return
        batch, self._attempts = self._attempts, []
        config = self.broker.config
        try:
            async with config.driver.own_transaction(config.engine) as conn:
                await store.record_attempts(conn, config.driver.tables, batch)
        except Exception:
            self._attempts[:0] = batch
            log.warning("could not record %d webhook attempts; kept for the next write", len(batch))

    async def close(self) -> None:
        """Write the last attempts and close the HTTP client (the broker's stop does)."""
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        self._flusher = None
        await self.flush_attempts()
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        self._endpoints.clear()


__all__ = ["DeliveryRefused", "WebhookDelivery", "decide", "retry_after_seconds"]
