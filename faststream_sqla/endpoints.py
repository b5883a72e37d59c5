"""What an HTTP endpoint may be (docs/webhooks.md): its name, URL, headers, timeout and
retry schedule, checked before anything is written; its secrets; and the rule that
keeps deliveries off private networks unless the endpoint allows it.

No SQL here: the statements are faststream_sqla.drivers.endpoints, the admin side
admin/endpoints.py, the delivery faststream_sqla.webhooks.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import math
import secrets
import socket
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from .exceptions import InvalidEndpointError, UnresolvedHostError, shown
from .options import checked_key
from .schema import MAX_SECRET_LENGTH, MAX_URL_LENGTH

#: a generated secret's random bytes (Standard Webhooks: 24 to 64)
SECRET_BYTES = 24
SECRET_PREFIX = "whsec_"
#: characters of a secret shown where it must be told apart from another
HINT_LENGTH = 10
#: bounds of a request's timeout, seconds
MIN_TIMEOUT, MAX_TIMEOUT = 0.1, 300.0
#: the longest wait before a retry, and the most retries a schedule may hold
MAX_RETRY_DELAY, MAX_RETRIES = 24 * 3600.0, 30
#: the default retry schedule, seconds before each retry: from seconds to hours, as
#: the webhook services that publish theirs do; a delivery still failing after the
#: last is dead-lettered (about 28 hours after the first attempt)
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
#: headers the delivery sets itself, or that belong to one connection
RESERVED_HEADERS = frozenset(
    {
        "webhook-id", "webhook-timestamp", "webhook-signature", "content-type",
        "content-length", "host", "connection", "transfer-encoding", "keep-alive", "upgrade",
        "te", "trailer", "proxy-authorization", "proxy-connection",
    }
)  # fmt: skip
MAX_HEADERS = 32
MAX_HEADER_LENGTH = 4096


def checked_name(name: object) -> str:
    """An endpoint's name, which is also its channel of the delivery queue."""
    value = checked_key(name, "endpoint name")
    if value is None or not value.strip() or not value.isprintable():
        msg = f"endpoint name {shown(name)} must be printable text, not blank"
        raise InvalidEndpointError(msg)
    return value


def checked_url(url: object) -> str:
    """An http or https URL with a host and no credentials in it."""
    if not isinstance(url, str):
        msg = f"endpoint url must be a str, got {type(url).__name__}"
        raise InvalidEndpointError(msg)
    if not url or len(url) > MAX_URL_LENGTH:
        msg = f"endpoint url must be 1 to {MAX_URL_LENGTH} characters long, got {len(url)}"
        raise InvalidEndpointError(msg)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError as e:
        msg = f"endpoint url {shown(url)} cannot be read: {e}"
        raise InvalidEndpointError(msg) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"endpoint url {shown(url)} must be http:// or https:// with a host"
        raise InvalidEndpointError(msg)
    if parts.username is not None or parts.password is not None:
        # it would be stored and shown; a credential belongs in a header
        msg = "endpoint url must not hold a user or password: send credentials in headers"
        raise InvalidEndpointError(msg)
    if any(not c.isprintable() or c.isspace() for c in url):
        msg = f"endpoint url {shown(url)} contains spaces or control characters"
        raise InvalidEndpointError(msg)
    return url


def checked_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT
    ):
        msg = (
            f"endpoint timeout must be {MIN_TIMEOUT} to {MAX_TIMEOUT} seconds, got {shown(timeout)}"
        )
        raise InvalidEndpointError(msg)
    return float(timeout)


def checked_headers(headers: object) -> dict[str, str] | None:
    """Extra request headers: text names and values, none the delivery sets itself."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        msg = f"endpoint headers must be a mapping of str to str, got {type(headers).__name__}"
        raise InvalidEndpointError(msg)
    if len(headers) > MAX_HEADERS:
        msg = f"an endpoint takes at most {MAX_HEADERS} headers, got {len(headers)}"
        raise InvalidEndpointError(msg)
    out: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            msg = "endpoint headers must be a mapping of str to str"
            raise InvalidEndpointError(msg)
        token = name.strip()
        if not token or any(c in token for c in ' :\t\r\n"(),/;<=>?@[\\]{}') or not token.isascii():
            msg = f"endpoint header name {shown(name)} is not a valid HTTP header name"
            raise InvalidEndpointError(msg)
        if token.lower() in RESERVED_HEADERS:
            msg = f"endpoint header {shown(name)} is set by the delivery itself"
            raise InvalidEndpointError(msg)
        if len(value) > MAX_HEADER_LENGTH or any(c in value for c in "\r\n\x00"):
            msg = f"endpoint header {shown(name)} has a value too long or with line breaks"
            raise InvalidEndpointError(msg)
        out[token] = value
    return out


def checked_retry_schedule(schedule: object) -> list[float] | None:
    """Seconds before each retry; None: DEFAULT_RETRY_SCHEDULE; [] never retries."""
    if schedule is None:
        return None
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence):
        msg = f"retry_schedule must be a list of seconds, got {type(schedule).__name__}"
        raise InvalidEndpointError(msg)
    if len(schedule) > MAX_RETRIES:
        msg = f"retry_schedule holds at most {MAX_RETRIES} delays, got {len(schedule)}"
        raise InvalidEndpointError(msg)
    out = []
    for delay in schedule:
        if (
            isinstance(delay, bool)
            or not isinstance(delay, (int, float))
            or not math.isfinite(delay)
            or not 0 <= delay <= MAX_RETRY_DELAY
        ):
            msg = f"each retry delay must be 0 to {MAX_RETRY_DELAY:.0f} seconds, got {shown(delay)}"
            raise InvalidEndpointError(msg)
        out.append(float(delay))
    return out


def new_secret() -> str:
    """A new signing secret: `whsec_` and the base64 of random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def checked_secret(secret: object) -> str:
    """A secret given by the user: `whsec_` and base64 of 24 to 64 bytes. The message
    never repeats it."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        msg = f"an endpoint secret must be a str starting with {SECRET_PREFIX!r}"
        raise InvalidEndpointError(msg)
    if len(secret) > MAX_SECRET_LENGTH:
        msg = f"an endpoint secret is at most {MAX_SECRET_LENGTH} characters long"
        raise InvalidEndpointError(msg)
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except ValueError:
        msg = f"an endpoint secret must be {SECRET_PREFIX!r} followed by base64"
        raise InvalidEndpointError(msg) from None
    if not 24 <= len(key) <= 64:
        msg = f"an endpoint secret must hold 24 to 64 bytes after {SECRET_PREFIX!r}, got {len(key)}"
        raise InvalidEndpointError(msg)
    return secret


def secret_hint(secret: str) -> str:
    """What lists show of a secret: enough to tell two apart, not to sign with."""
    return secret[:HINT_LENGTH] + "…"


#: IPv6 prefixes whose last or middle bits are an IPv4 address a gateway or tunnel may
#: reach: NAT64's well-known prefix, IPv4-compatible addresses and 6to4
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet (not private, loopback,
    link-local, multicast, reserved or unspecified, nor an IPv6 address that carries
    one of those: mapped, NAT64, IPv4-compatible or 6to4)."""
    ip: Any = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and not is_public(str(embedded)):
            return False
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def public_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order, when every one is
    public; InvalidEndpointError naming the others, UnresolvedHostError when it does
    not resolve."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        msg = f"endpoint host {shown(host)} does not resolve: {e.strerror or e}"
        raise UnresolvedHostError(msg) from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    private = sorted(address for address in addresses if not is_public(address))
    if private:
        msg = (
            f"endpoint host {shown(host)} resolves to a private or local address "
            f"({', '.join(private)}); pass allow_private=True to deliver there"
        )
        raise InvalidEndpointError(msg)
    return addresses


async def check_address(url: str, *, allow_private: bool) -> None:
    """Refuse an endpoint whose host resolves to a private address (or does not
    resolve), unless `allow_private`: a webhook must not become a way into the network
    the broker runs in. Checked when the endpoint is added, whenever a delivering
    process reads it, and at each connection (webhooks.guard: a name may resolve
    elsewhere by then)."""
    if allow_private:
        return
    parts = urlsplit(url)
    await public_addresses(
        parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    )


__all__ = [
    "DEFAULT_RETRY_SCHEDULE",
    "check_address",
    "checked_headers",
    "checked_name",
    "checked_retry_schedule",
    "checked_secret",
    "checked_timeout",
    "checked_url",
    "is_public",
    "new_secret",
    "public_addresses",
    "secret_hint",
]
