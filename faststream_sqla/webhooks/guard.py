"""The private-address rule at connect time (docs/webhooks.md): an HTTP transport
that resolves each host itself, checks every address, and connects only to those it
checked. The check when an endpoint is read is not enough on its own: a name can
answer a public address then and a private one a moment later, when the HTTP client
resolves it again (DNS rebinding).

Only the connections without a proxy go through it: through a proxy, the proxy
resolves and connects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx

from faststream_sqla.endpoints import public_addresses
from faststream_sqla.exceptions import UnresolvedHostError

#: (host, port) -> the addresses it may be connected to, in the order to try them
Addresses = Callable[[str, int], Awaitable[list[str]]]


class _PublicOnly(httpcore.AsyncNetworkBackend):
    """Connects only to the addresses `addresses` gives for a host (its public ones),
    in that order, the next when one refuses."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, addresses: Addresses) -> None:
        self._inner = inner
        self._addresses = addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await asyncio.wait_for(self._addresses(host, port), timeout)
        except asyncio.TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
        except UnresolvedHostError as e:
            # a connection error, retried: a resolver may fail for a while
            raise httpcore.ConnectError(str(e)) from None
        failure: Exception | None = None
        for address in addresses:
            try:
                # by address: the name is not resolved again; TLS still checks the
                # certificate against the request's host (httpcore passes it as SNI)
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                failure = e
        if failure is None:
            raise httpcore.ConnectError(f"{host} has no address to connect to")
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are not delivered over unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PublicOnlyTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, its connection pool connecting through `_PublicOnly`.
    `addresses` gives the addresses a host may be connected to, or raises: by default
    its public ones, or InvalidEndpointError when it has any other."""

    def __init__(self, *, limits: httpx.Limits, addresses: Addresses = public_addresses) -> None:
        super().__init__(limits=limits)
        pool = getattr(self, "_pool", None)
        if type(pool) is not httpcore.AsyncConnectionPool:
            # httpx keeps its pool elsewhere now: fail loudly rather than deliver unchecked
            msg = f"this httpx ({httpx.__version__}) cannot take the private-address check"
            raise RuntimeError(msg)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PublicOnly(httpcore.AnyIOBackend(), addresses),
        )


__all__ = ["PublicOnlyTransport"]
