"""Signatures as the Standard Webhooks specification defines them, checked against an
HMAC computed here from the specification's own words, and the receiver's `verify`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest

from faststream_sqla.webhooks import WebhookVerificationError, sign, signed_headers, verify

KEY = bytes(range(24))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
OTHER = "whsec_" + base64.b64encode(bytes(range(1, 25))).decode()


def expected(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def test_signature_is_hmac_sha256_of_id_timestamp_and_body_under_the_decoded_secret():
    assert sign(SECRET, "msg_1", 1700000000, b'{"a":1}') == expected(
        KEY, "msg_1", 1700000000, b'{"a":1}'
    )


def test_signed_headers_carry_one_signature_per_secret_current_first():
    headers = signed_headers([SECRET, OTHER], "msg_2", b"x", timestamp=1700000001)
    assert headers["webhook-id"] == "msg_2"
    assert headers["webhook-timestamp"] == "1700000001"
    first, second = headers["webhook-signature"].split(" ")
    assert first == expected(KEY, "msg_2", 1700000001, b"x")
    assert second == expected(bytes(range(1, 25)), "msg_2", 1700000001, b"x")


def test_verify_accepts_a_genuine_webhook_with_headers_in_any_case():
    headers = signed_headers([SECRET], "msg_3", b"body")
    verify(SECRET, {k.upper(): v for k, v in headers.items()}, b"body")
    verify(SECRET, headers, "body")  # text bodies too


def test_during_a_rotation_either_secret_verifies():
    headers = signed_headers([OTHER, SECRET], "msg_4", b"body")
    verify(SECRET, headers, b"body")
    verify(OTHER, headers, b"body")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda h, b: (h, b + b"!"), "no signature matches"),
        (lambda h, b: ({**h, "webhook-id": "msg_other"}, b), "no signature matches"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "webhook-signature"}, b), "missing"),
        (lambda h, b: ({**h, "webhook-timestamp": "soon"}, b), "not a whole number"),
        (lambda h, b: ({**h, "webhook-signature": "v2,abc"}, b), "no signature matches"),
    ],
)
def test_verify_refuses_a_tampered_webhook_naming_why(change, reason):
    headers, body = change(signed_headers([SECRET], "msg_5", b"body"), b"body")
    with pytest.raises(WebhookVerificationError, match=reason):
        verify(SECRET, headers, body)


def test_verify_refuses_a_stale_timestamp_beyond_the_tolerance():
    old = int(time.time()) - 600
    headers = signed_headers([SECRET], "msg_6", b"body", timestamp=old)
    with pytest.raises(WebhookVerificationError, match="away from now"):
        verify(SECRET, headers, b"body")
    verify(SECRET, headers, b"body", tolerance=900)


def test_verify_under_another_secret_fails():
    headers = signed_headers([SECRET], "msg_7", b"body")
    with pytest.raises(WebhookVerificationError):
        verify(OTHER, headers, b"body")


@pytest.mark.parametrize("tolerance", [float("nan"), float("inf"), -1, 86401, True, "300"])
def test_verify_refuses_a_tolerance_that_would_not_bound_the_timestamp(tolerance):
    from faststream_sqla.exceptions import InvalidOptionError

    headers = signed_headers([SECRET], "msg_1", b"body", timestamp=1)
    with pytest.raises(InvalidOptionError, match="tolerance must be 0 to 86,400 seconds"):
        verify(SECRET, headers, b"body", tolerance=tolerance)
