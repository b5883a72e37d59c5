"""Signed webhooks to HTTP endpoints (docs/webhooks.md): `WebhookDelivery` delivers,
`verify` is the receiver's check of a signature."""

from faststream_sqla.exceptions import WebhookVerificationError

from .delivery import DeliveryRefused, WebhookDelivery
from .signing import sign, signed_headers, verify

__all__ = [
    "DeliveryRefused",
    "WebhookDelivery",
    "WebhookVerificationError",
    "sign",
    "signed_headers",
    "verify",
]
