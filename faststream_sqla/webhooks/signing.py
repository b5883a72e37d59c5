"""Webhook signatures as the Standard Webhooks specification defines them: the sender
signs `<webhook-id>.<webhook-timestamp>.<body>` with HMAC-SHA256 under the endpoint's
secret (`whsec_` and the base64 of the key) and sends `v1,<base64 signature>`; several
signatures, space-separated, while a secret is being rotated. `verify` is the
receiver's side."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import time
from collections.abc import Mapping, Sequence

from faststream_sqla.exceptions import InvalidOptionError, WebhookVerificationError, shown

ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER = (
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
)
SECRET_PREFIX = "whsec_"
#: seconds a receiver accepts between a webhook's timestamp and its own clock
DEFAULT_TOLERANCE = 300
#: the widest tolerance verify takes: a day, beyond which the timestamp protects nothing
MAX_TOLERANCE = 24 * 3600


def _key(secret: str) -> bytes:
    encoded = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError:
        raise WebhookVerificationError(
            f"a webhook secret is {SECRET_PREFIX!r} followed by base64"
        ) from None


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,` and the base64 HMAC-SHA256 of `msg_id.timestamp.body` under `secret`."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    secrets: Sequence[str], msg_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The three headers of one request, signed with each of `secrets` (the current
    one first)."""
    at = int(time.time()) if timestamp is None else timestamp
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(at),
        SIGNATURE_HEADER: " ".join(sign(secret, msg_id, at, body) for secret in secrets),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Check a received webhook: its three headers are there, its timestamp is within
    `tolerance` seconds of now (either way), and one of its `v1` signatures is the
    body's under `secret`. Raises WebhookVerificationError naming what failed;
    returns None when the webhook is genuine."""
    # a NaN tolerance would compare false and so accept any timestamp: refuse it
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float))
        or not math.isfinite(tolerance)
        or not 0 <= tolerance <= MAX_TOLERANCE
    ):
        msg = f"tolerance must be 0 to {MAX_TOLERANCE:,} seconds, got {shown(tolerance)}"
        raise InvalidOptionError(msg)
    lowered = {str(name).lower(): value for name, value in headers.items()}
    missing = [h for h in (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER) if h not in lowered]
    if missing:
        raise WebhookVerificationError(f"missing header(s): {', '.join(missing)}")
    msg_id, stamp = lowered[ID_HEADER], lowered[TIMESTAMP_HEADER]
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError(f"{TIMESTAMP_HEADER} is not a whole number") from None
    if abs(time.time() - timestamp) > tolerance:
        raise WebhookVerificationError(
            f"{TIMESTAMP_HEADER} is more than {tolerance:g} s away from now: "
            "a replayed or delayed webhook, or a clock out of step"
        )
    raw = body.encode() if isinstance(body, str) else body
    expected = sign(secret, msg_id, timestamp, raw).split(",", 1)[1]
    for candidate in lowered[SIGNATURE_HEADER].split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return
    raise WebhookVerificationError("no signature matches the body under this secret")


__all__ = ["DEFAULT_TOLERANCE", "sign", "signed_headers", "verify"]
