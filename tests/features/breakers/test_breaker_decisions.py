"""The circuit breaker's rules as pure functions: what an outcome counts as, and what a
batch of attempts changes in a breaker as stored (no database: the integration tests in
tests/features/breakers/test_queue_breaker.py run them against each one)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from faststream.message import AckStatus

from faststream_sqla import lifecycle
from faststream_sqla.drivers.controls import BreakerChange, BreakerRecord
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.retry import ConstantRetryStrategy
from faststream_sqla.schema import BreakerState, MessageState
from faststream_sqla.subscriber.breaker import (
    Attempt,
    Breakers,
    Tally,
    attempt_kind,
    decide,
    decide_channel,
)

T0 = datetime(2026, 1, 1, 12, 0, 0)
RETRY = ConstantRetryStrategy(delay_seconds=1, max_attempts=3)
ME, OTHER = "host:1:aaaaaaaa", "host:2:bbbbbbbb"


def claimed(**overrides) -> ClaimedMessage:
    fields = {
        "id": 7, "queue": "q", "headers": {}, "payload": b"{}", "attempts_count": 0,
        "deliveries_count": 1, "created_at": T0, "next_attempt_at": T0, "acquired_at": T0,
    }
    return ClaimedMessage(**{**fields, **overrides})


def attempted(msg: ClaimedMessage, error: BaseException | None = None):
    return lifecycle.after_attempt(
        msg, started_at=T0, finished_at=T0 + timedelta(seconds=1), error=error,
        retry_strategy=RETRY,
    )


def test_what_an_outcome_counts_as() -> None:
    ok = claimed(decision=AckStatus.ACKED)
    assert attempt_kind(ok, attempted(ok)) is Attempt.SUCCEEDED
    raised = claimed()
    assert attempt_kind(raised, attempted(raised, RuntimeError("x"))) is Attempt.FAILED
    nacked = claimed(decision=AckStatus.NACKED)
    assert attempt_kind(nacked, attempted(nacked)) is Attempt.FAILED
    last = claimed(attempts_count=2)  # out of attempts: FAILED with its error
    outcome = attempted(last, RuntimeError("x"))
    assert outcome.state is MessageState.FAILED and attempt_kind(last, outcome) is Attempt.FAILED
    rejected = claimed(decision=AckStatus.REJECTED)  # a verdict on the message itself
    assert attempt_kind(rejected, attempted(rejected)) is None
    deferred = claimed(deferred=True, decision=AckStatus.NACKED)
    assert attempt_kind(deferred, attempted(deferred)) is None
    plain = claimed()
    for outcome in (
        lifecycle.expired(plain),
        lifecycle.deliveries_exceeded(plain, 1),
        lifecycle.released(plain, started=False),
        lifecycle.released(plain, started=True),
    ):
        assert attempt_kind(plain, outcome) is None


def tally(*kinds: Attempt | None, probe_at: int | None = None) -> Tally:
    t = Tally()
    for i, kind in enumerate(kinds):
        t.add(kind, is_probe=i == probe_at)
    return t


F, S = Attempt.FAILED, Attempt.SUCCEEDED


def judge(current: BreakerRecord, t: Tally) -> BreakerChange | None:
    return decide(current, t, threshold=3, cooldown=5.0, me=ME)


def test_closed_counts_consecutive_failures_and_opens_at_the_threshold() -> None:
    closed = BreakerRecord()
    assert judge(closed, tally(F, F)) == BreakerChange(BreakerState.CLOSED, 2)
    # a success in the batch: only the failures after it are consecutive
    assert judge(BreakerRecord(failures=2), tally(F, S, F)) == BreakerChange(BreakerState.CLOSED, 1)
    assert judge(BreakerRecord(failures=2), tally(S)) == BreakerChange(BreakerState.CLOSED, 0)
    assert judge(closed, tally(S)) is None  # nothing to write
    opened = judge(BreakerRecord(failures=1), tally(F, F, F))
    assert opened == BreakerChange(
        BreakerState.OPEN, 4, opens=True, cooldown=5.0, reason="4 consecutive failures"
    )


def test_open_ignores_late_outcomes() -> None:
    record = BreakerRecord(state=BreakerState.OPEN, failures=3)
    assert judge(record, tally(F, F)) is None
    assert judge(record, tally(S)) is None


@pytest.mark.parametrize("holder", [ME, OTHER])
def test_half_open_is_decided_by_its_probe_alone(holder) -> None:
    record = BreakerRecord(state=BreakerState.HALF_OPEN, failures=3, probe=holder)
    # outcomes of messages other than the probe decide nothing
    assert judge(record, tally(S, F)) is None
    succeeded, failed = judge(record, tally(S, probe_at=0)), judge(record, tally(F, probe_at=0))
    if holder == OTHER:  # not this process's probe
        assert succeeded is None and failed is None
        return
    assert succeeded == BreakerChange(BreakerState.CLOSED, 0, reason="probe succeeded")
    assert failed == BreakerChange(
        BreakerState.OPEN, 4, opens=True, cooldown=5.0, reason="probe failed"
    )
    # a probe that settles without a verdict (deferred, expired) decides nothing
    assert judge(record, tally(None, probe_at=0)) is None


FAILED_, SUCCEEDED = Attempt.FAILED, Attempt.SUCCEEDED


def channel(current: BreakerRecord, *attempts: tuple[Attempt, datetime | None]):
    return decide_channel(current, attempts, threshold=3, cooldown=5)


def test_a_channel_breaker_counts_consecutive_failures_like_a_queue_breaker() -> None:
    closed = BreakerRecord(BreakerState.CLOSED, 1)
    assert channel(closed, (FAILED_, T0)) == BreakerChange(BreakerState.CLOSED, 2)
    assert channel(closed, (FAILED_, T0), (FAILED_, T0)) == BreakerChange(
        BreakerState.OPEN, 3, opens=True, cooldown=5, reason="3 consecutive failures"
    )
    assert channel(closed, (FAILED_, T0), (SUCCEEDED, T0)) == BreakerChange(
        BreakerState.CLOSED, 0
    )
    assert channel(BreakerRecord(), (SUCCEEDED, T0)) is None


def test_only_the_probe_decides_a_half_open_channel_breaker() -> None:
    """The probe is the attempt claimed when the breaker became HALF_OPEN; attempts
    claimed before it ran before the breaker opened and change nothing."""
    since = T0 + timedelta(seconds=10)
    half_open = BreakerRecord(BreakerState.HALF_OPEN, 3, changed_at=since)
    before = T0
    assert channel(half_open, (SUCCEEDED, before), (FAILED_, before)) is None
    assert channel(half_open, (FAILED_, before), (SUCCEEDED, since)) == BreakerChange(
        BreakerState.CLOSED, 0, reason="probe succeeded"
    )
    assert channel(half_open, (FAILED_, since)) == BreakerChange(
        BreakerState.OPEN, 4, opens=True, cooldown=5, reason="probe failed"
    )
    # OPEN: no probe is out, whatever settles now ran before it opened
    opened = BreakerRecord(BreakerState.OPEN, 3, changed_at=T0, reopens_at=since)
    assert channel(opened, (FAILED_, since), (SUCCEEDED, since)) is None


def breakers_of_q(opened: list[str]) -> Breakers:
    """A subscriber's breakers of queue "q", as this process sees them (no database)."""
    return Breakers(
        engine=None, driver=None, queues=["q"], threshold=3, cooldown=1.0,  # type: ignore[arg-type]
        silent_after=5.0, log=lambda _level, _message: None, on_opened=opened.append,
        wake=asyncio.Event(), has_idle_worker=lambda: True, me=ME,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("state", "probe", "goes_back"),
    [
        (BreakerState.CLOSED, None, False),
        (BreakerState.OPEN, None, True),
        (BreakerState.HALF_OPEN, OTHER, True),
        (BreakerState.HALF_OPEN, ME, False),
    ],
)
def test_a_claim_that_returns_after_the_breaker_opened_goes_back(state, probe, goes_back) -> None:
    """The claim ran while the breaker's view changed to `state`: the buffer was given
    back then, without this claim's messages, which no worker may start."""
    opened: list[str] = []
    breakers = breakers_of_q(opened)
    breakers._apply("q", BreakerRecord(state=state, failures=3, probe=probe))
    assert breakers.claimed("q", [claimed()]) is goes_back
    assert breakers.claimed("q", []) is False
    if state is BreakerState.HALF_OPEN and probe == ME:
        assert breakers.views["q"].probe_message == 7  # this process's probe


def test_giving_back_a_late_claim_gives_back_the_queues_buffer() -> None:
    opened: list[str] = []
    breakers = breakers_of_q(opened)
    breakers.give_back("q")
    assert opened == ["q"]
