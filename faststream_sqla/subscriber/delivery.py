"""Delivery: what a worker does with each claimed message. It admits the message
(the circuit breaker may hold it back), settles without the handler what must not
reach it (`lifecycle.before_handler`), runs the handler within `handler_timeout`,
reads the handler's decision and error into an outcome, and hands the outcome to the
flusher. One `Delivery` serves every worker task of a subscriber."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from faststream.exceptions import AckMessage, NackMessage, RejectMessage, StopConsume
from faststream.message import AckStatus

from faststream_sqla import lifecycle
from faststream_sqla.drivers.base import Outcome
from faststream_sqla.exceptions import HandlerTimeoutError, InvalidOptionError, RetryAfter
from faststream_sqla.message import ClaimedMessage, validate_delay

from .breaker import Admission, Breakers
from .fetcher import DELIVERIES_PER_YIELD
from .upkeep import CONTROL_INTERVAL

if TYPE_CHECKING:
    from faststream_sqla.health import DatabaseHealth

    from .buffer import PrefetchBuffer
    from .config import ConsumeOptions
    from .fetcher import Fetcher
    from .flusher import OutcomeFlusher
    from .loops import Log

# A handler's own Ack/Nack/RejectMessage under AckPolicy.MANUAL (no middleware catches them)
_DECISIONS = {
    AckMessage: AckStatus.ACKED,
    NackMessage: AckStatus.NACKED,
    RejectMessage: AckStatus.REJECTED,
}


_Told = TypeVar("_Told", Outcome, None)


def told(raw: ClaimedMessage, outcome: _Told) -> _Told:
    """`outcome`, once the delivery's observer (if any) has heard it, once."""
    if raw.on_outcome is not None:
        on_outcome, raw.on_outcome = raw.on_outcome, None
        try:
            on_outcome(outcome)
        except Exception:
            logging.getLogger(__name__).exception("an outcome observer failed")
    return outcome


class Delivery:
    """The workers' side of a subscriber (see the module docstring)."""

    def __init__(
        self,
        *,
        options: ConsumeOptions,
        batch: bool,
        buffer: PrefetchBuffer,
        fetcher: Fetcher,
        flusher: OutcomeFlusher,
        breakers: Breakers | None,
        held: dict[int, ClaimedMessage],
        health: DatabaseHealth,
        stopping: asyncio.Event,
        process_message: Callable[[Any], Awaitable[Any]],
        stop_consuming: Callable[..., None],
        log: Log,
    ) -> None:
        self.options, self.batch = options, batch
        self.buffer, self.fetcher, self.flusher = buffer, fetcher, flusher
        self.breakers, self.held, self.health = breakers, held, health
        #: set when the subscriber's stop begins: workers waiting out an outage give up
        self.stopping = stopping
        #: whether the subscriber still consumes (False once its stop began); an
        #: attribute the subscriber sets, as it is read per message
        self.consuming = True
        #: FastStream's consume path for one message or a batch
        self.process_message = process_message
        #: a handler raised StopConsume (exit_app=False) or SystemExit (True)
        self.stop_consuming = stop_consuming
        self.log = log
        #: the message each worker task is delivering, for the stall watch
        self.delivering: dict[asyncio.Task[Any], ClaimedMessage] = {}
        #: the handler's run, with its timeout only where there is one: a coroutine
        #: less per message otherwise
        self.run = self.run_handler if options.handler_timeout is None else self.run_handler_in_time
        self.counts_deliveries = options.max_deliveries is not None

    def take_batch(self, first: ClaimedMessage) -> list[ClaimedMessage]:
        batch = [first]
        buffer = self.buffer
        while buffer and len(batch) < self.options.fetch_batch_size:
            raw = buffer.take()
            if raw is None:  # a stop sentinel: leave it for the next round
                buffer.put_back(None)
                break
            batch.append(raw)
        return batch

    async def work(self) -> None:
        buffer, fetcher, flusher = self.buffer, self.fetcher, self.flusher
        running, me = self.delivering, asyncio.current_task()
        assert me is not None  # workers run as tasks (_spawn)
        health = self.health
        breakers = self.breakers
        delivered = 0
        while True:
            # The common case, a buffered message, costs a popleft; only an empty
            # buffer makes the worker wait.
            raw = buffer.take() if buffer else await buffer.get()
            if raw is None:
                return
            if health.is_down and self.consuming:
                # The database is gone: a handler would fail on it and spend an attempt.
                # The message stays claimed here until it answers (or we stop).
                buffer.put_back(raw)
                await health.until_reachable(self.stopping)
                continue
            if breakers is not None and self.consuming:
                admission = breakers.admits(raw)
                if admission is Admission.WAIT:
                    # failures on their way to the database may open the breaker: no
                    # new handler starts before they are counted
                    buffer.put_back(raw)
                    flusher.write_soon()
                    await breakers.changed(timeout=CONTROL_INTERVAL)
                    continue
                if admission is Admission.GIVE_BACK:
                    flusher.add(lifecycle.released(raw, started=False))
                    fetcher.notify_taken()
                    continue
            running[me] = raw
            batch = self.take_batch(raw) if self.batch else None
            if batch is not None and breakers is not None:
                batch = self.admitted(batch, breakers)
            fetcher.notify_taken()
            if not self.consuming:  # stopping: messages not yet started go back
                for item in batch or (raw,):
                    flusher.add(lifecycle.released(item, started=False))
                continue
            try:
                if batch is None:
                    await self.deliver_one(raw)
                else:
                    await self.deliver(batch)
                # A no-op handler never awaits anything real: without this a worker would
                # drain the whole buffer in one go, starving the fetch and flush loops of
                # the event-loop turns their I/O needs, and the buffer would run dry. A
                # turn per delivery costs more than it helps; one per few does both,
                # except while the fetcher waits for room, or for a claim's several
                # replies with little left in the buffer (Fetcher.claim_in_flight).
                delivered += 1
                if (
                    delivered % DELIVERIES_PER_YIELD == 0
                    or fetcher.space.is_set()
                    or (fetcher.claim_in_flight and len(buffer) < fetcher.hurry_below)
                ):
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # deliveries hand over their outcomes last, so none exist for these yet
                self.log(logging.CRITICAL, f"delivery failed unexpectedly: {exc!r}", exc_info=exc)
                for item in batch or (raw,):
                    flusher.add(lifecycle.released(item, started=True))

    def admitted(self, batch: list[ClaimedMessage], breakers: Breakers) -> list[ClaimedMessage]:
        """The messages of a batch its breakers let run (the first one was let); the
        others go back unstarted."""
        admitted = [batch[0]]
        for raw in batch[1:]:
            if breakers.admits(raw) is Admission.RUN:
                admitted.append(raw)
            else:
                self.flusher.add(lifecycle.released(raw, started=False))
        return admitted

    async def deliver_one(self, raw: ClaimedMessage) -> None:
        """`deliver` for one message, without the lists: this runs per message."""
        started = time.monotonic()
        # before_handler can hold back only a message that may expire, or any when
        # deliveries are counted
        if self.counts_deliveries or raw.expires_at is not None:
            settled = lifecycle.before_handler(raw, self.options.max_deliveries, started)
            if settled is not None:
                self.flusher.add(settled)
                return
        try:
            error = await self.run(raw, (raw,))
        except asyncio.CancelledError:
            # Shutdown cut the handler short: not its fault, so no attempt is spent.
            self.flusher.add(told(raw, lifecycle.released(raw, started=True)))
            raise
        if error is not None and await self.held_for_outage((raw,), error):
            return
        if error is None and raw.decision is AckStatus.ACKED:  # `outcome`'s common case
            outcome = lifecycle.completed(raw, lifecycle.db_time(raw, started))
        else:
            outcome = self.outcome(raw, started, error)
        if raw.on_outcome is not None:  # checked here: this runs per message
            told(raw, outcome)
        if self.breakers is not None:
            self.breakers.handed(raw, outcome)
        self.flusher.add(outcome)
        if raw.ordering_key is not None:
            # the key's next message is claimable only once this outcome is written
            self.flusher.write_soon()

    async def deliver(self, batch: list[ClaimedMessage]) -> None:
        """Run the handler on `batch`; its outcomes are handed to the flusher together at
        the end, so an unexpected error leaves none of them half-settled."""
        started = time.monotonic()
        live, settled = lifecycle.split_before_handler(batch, self.options.max_deliveries, started)
        error: BaseException | None = None
        if live:
            try:
                error = await self.run(live, live)
            except asyncio.CancelledError:
                settled += (told(raw, lifecycle.released(raw, started=True)) for raw in live)
                self.flusher.add_all(settled)
                raise
            if error is not None and await self.held_for_outage(live, error):
                live = []
        if live and error is None:
            # the common case: every message acked by the ack policy, all from one claim
            # (one started_at for them all); `outcome` decides each otherwise
            self.outcomes_of_handled(live, started, settled)
        else:
            for raw in live:
                outcome = self.outcome(raw, started, error)
                settled.append(outcome if raw.on_outcome is None else told(raw, outcome))
        if self.breakers is not None:
            held = self.held
            for outcome in settled:
                if (handed := held.get(outcome.id)) is not None:
                    self.breakers.handed(handed, outcome)
        self.flusher.add_all(settled)
        # a list and a count in C: a generator would be resumed once per message
        if [raw.ordering_key for raw in batch].count(None) != len(batch):
            self.flusher.write_soon()  # as in _deliver_one

    async def run_handler_in_time(
        self, message: ClaimedMessage | list[ClaimedMessage], live: Sequence[ClaimedMessage]
    ) -> BaseException | None:
        """`_run_handler`, cancelled after the subscriber's handler_timeout (a failed
        attempt). A cancellation from outside (shutdown) still propagates."""
        timeout = self.options.handler_timeout
        if timeout is None:
            return await self.run_handler(message, live)
        try:
            return await asyncio.wait_for(self.run_handler(message, live), timeout)
        except asyncio.TimeoutError:
            for raw in live:  # whatever the handler decided before it was cut off
                if raw.decision is not AckStatus.ACKED:
                    raw.decision = None
            return HandlerTimeoutError(
                f"the handler ran longer than handler_timeout={timeout:g}s and was cancelled"
            )

    async def run_handler(
        self, message: ClaimedMessage | list[ClaimedMessage], live: Sequence[ClaimedMessage]
    ) -> BaseException | None:
        """FastStream's consume path for one message or a batch; returns the error to
        record on the attempt, if any."""
        try:
            await self.process_message(message)
        except (AckMessage, NackMessage, RejectMessage) as exc:
            return self.take_raised_decision(live, exc)
        except StopConsume:
            self.stop_consuming(exit_app=False)
        except SystemExit:
            self.stop_consuming(exit_app=True)
        except Exception as exc:
            self.classify(live, exc)
            return exc
        return None

    async def held_for_outage(self, live: Sequence[ClaimedMessage], error: BaseException) -> bool:
        """Whether the handler failed because the broker's database is gone: then its
        messages go back to the front of the buffer, their attempt not spent, to run
        again once the database answers. A message the handler acked keeps its ack."""
        if any(raw.decision is AckStatus.ACKED for raw in live):
            return False
        if not await self.health.confirms_outage(error):
            return False
        for raw in reversed(live):
            raw.decision, raw.nack_delay = None, None
            told(raw, None)
            self.buffer.put_back(raw)
        return True

    def classify(self, live: Sequence[ClaimedMessage], exc: Exception) -> None:
        """Error classes: a RetryAfter retries after its own delay; a permanent error
        (the subscriber's `permanent_exceptions`, or a body that fails the handler's
        model) fails the message without more retries. A message the handler or the
        ack policy already settled otherwise (acked first, rejected) keeps that."""
        if isinstance(exc, RetryAfter):
            for raw in live:
                if raw.decision is None or raw.decision is AckStatus.NACKED:
                    raw.decision, raw.nack_delay = AckStatus.NACKED, exc.seconds
        elif isinstance(exc, (pydantic.ValidationError, *self.options.permanent_exceptions)):
            for raw in live:
                if raw.decision is None or raw.decision is AckStatus.NACKED:
                    raw.decision = AckStatus.REJECTED

    def outcomes_of_handled(
        self, live: list[ClaimedMessage], started: float, settled: list[Outcome]
    ) -> None:
        """`outcome` of each message of a batch whose handler raised nothing, appended to
        `settled`. Messages of one claim share their database start time: it is worked
        out once per claim, not once per message."""
        acquired_at, claimed_at = None, None
        started_at = lifecycle.db_time(live[0], started)
        for raw in live:
            if raw.decision is not AckStatus.ACKED:
                outcome = self.outcome(raw, started, None)
            else:
                if raw.acquired_at is not acquired_at or raw.claimed_at_monotonic != claimed_at:
                    acquired_at, claimed_at = raw.acquired_at, raw.claimed_at_monotonic
                    started_at = lifecycle.db_time(raw, started)
                outcome = lifecycle.completed(raw, started_at)
            settled.append(outcome if raw.on_outcome is None else told(raw, outcome))

    def outcome(self, raw: ClaimedMessage, started: float, error: BaseException | None) -> Outcome:
        started_at = lifecycle.db_time(raw, started)
        if raw.decision is AckStatus.ACKED and error is None:
            return lifecycle.completed(raw, started_at)  # once per message: no detour
        # Only a retry is timed from the attempt's end.
        return lifecycle.after_attempt(
            raw,
            started_at=started_at,
            finished_at=lifecycle.db_time(raw, time.monotonic()),
            error=error,
            retry_strategy=self.options.retry_strategy,
        )

    @staticmethod
    def take_raised_decision(
        live: Sequence[ClaimedMessage], exc: AckMessage | NackMessage | RejectMessage
    ) -> BaseException | None:
        """A decision raised under AckPolicy.MANUAL (no middleware turns it into a call).
        Returns an error to record if the decision's options were invalid."""
        delay = exc.extra_options.get("delay")
        error = None
        if delay is not None:
            try:
                delay = validate_delay(delay, "NackMessage delay")
            except InvalidOptionError as invalid:
                delay, error = None, invalid
        for raw in live:
            raw.decision = raw.decision or _DECISIONS[type(exc)]
            if raw.decision is AckStatus.NACKED and raw.nack_delay is None:
                raw.nack_delay = delay
        return error
