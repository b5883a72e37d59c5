"""What each HTTP response means for a delivery (no database: the rule alone)."""

from __future__ import annotations

import email.utils
import time

import pytest

from faststream_sqla.webhooks.delivery import MAX_RETRY_AFTER, decide, retry_after_seconds


@pytest.mark.parametrize(
    ("status", "retry_after", "verdict"),
    [
        (200, None, "delivered"),
        (204, None, "delivered"),
        (410, None, "gone"),
        (429, "2", "wait"),
        (503, "120", "wait"),
        (429, None, "retry"),
        (503, None, "retry"),
        (500, None, "retry"),
        (502, "5", "retry"),
        (None, None, "retry"),  # a timeout or a connection error
        (301, None, "retry"),  # redirects are not followed: a failure
        (400, None, "refused"),
        (404, None, "refused"),
        (422, "5", "refused"),
    ],
)
def test_each_response_has_its_verdict(status, retry_after, verdict):
    assert decide(status, retry_after) == verdict


def test_retry_after_reads_seconds_and_http_dates_and_is_capped_at_a_day():
    now = time.time()
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(str(10 * 86400)) == MAX_RETRY_AFTER
    date = email.utils.formatdate(now + 60, usegmt=True)
    assert 55 <= retry_after_seconds(date, now) <= 61
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None
