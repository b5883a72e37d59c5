"""The circuit breaker of a subscriber's queues, shared through the database.

Per queue (one control row, channel ''): CLOSED until `threshold` consecutive failed
attempts, then OPEN (no claims until the database's time passes `breaker_reopens_at`),
then HALF_OPEN with one process holding the probe: it claims one message, whose success
closes the breaker and whose failure opens it again. Only a process with an idle worker
takes the probe (or takes over a silent holder's), so the probe runs as soon as it is
claimed. What counts, and the decision, are
pure functions here (`attempt_kind`, `Tally`, `decide`); `Breakers` is one subscriber's
view of its queues' breakers, kept by its outcome flusher and its ControlWatcher, and
asked by its fetcher and workers. The statements are in drivers/controls.py.

Per channel (`per_channel`: the channel's own control row): the same states, counted
here the same way (`decide_channel`), but enforced by the channel claim itself
(channels.claim): an OPEN channel gets no share; once its reopening is due, one claim
gets room for one message, the probe, whichever process makes it, and marks the
breaker HALF_OPEN with the probe's claim time. A settled attempt is the probe's if it
was claimed then.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from faststream_sqla.drivers import controls
from faststream_sqla.drivers.base import Outcome, with_retries
from faststream_sqla.drivers.controls import (
    BreakerChange,
    BreakerDecision,
    BreakerRecord,
    ControlReading,
)
from faststream_sqla.schema import BreakerState, MessageState

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.message import ClaimedMessage

Log = Callable[..., None]
CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


class Attempt(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


def attempt_kind(raw: ClaimedMessage, outcome: Outcome) -> Attempt | None:
    """What an outcome tells the breaker: an attempt that completed, one whose handler
    raised or nacked (RETRYABLE, or FAILED with an error), or nothing: deferrals,
    expiries, releases and max_deliveries spend no attempt, and a rejection without
    an error is a verdict on the message, not on what the handler calls."""
    if outcome.attempts_count <= raw.attempts_count:
        return None
    if outcome.state is MessageState.COMPLETED:
        return Attempt.SUCCEEDED
    if outcome.state is MessageState.RETRYABLE or (
        outcome.state is MessageState.FAILED and outcome.last_error is not None
    ):
        return Attempt.FAILED
    return None


@dataclass
class Tally:
    """The attempts of one queue in one written batch of outcomes, in order."""

    failures: int = 0
    #: failures after the batch's last success
    trailing: int = 0
    succeeded: bool = False
    #: the probe's own outcome, if the probe this process holds is in the batch
    probe_settled: bool = False
    probe: Attempt | None = None

    def add(self, kind: Attempt | None, *, is_probe: bool) -> None:
        if is_probe:
            self.probe_settled, self.probe = True, kind
        if kind is Attempt.FAILED:
            self.failures += 1
            self.trailing += 1
        elif kind is Attempt.SUCCEEDED:
            self.succeeded, self.trailing = True, 0


def decide(
    current: BreakerRecord, tally: Tally, *, threshold: int, cooldown: float, me: str
) -> BreakerChange | None:
    """What the batch's attempts change in the breaker as stored, or None."""
    if current.state is CLOSED:
        failures = tally.trailing if tally.succeeded else current.failures + tally.failures
        if failures >= threshold:
            return BreakerChange(
                OPEN,
                failures,
                opens=True,
                cooldown=cooldown,
                reason=f"{failures} consecutive failures",
            )
        if failures == current.failures:
            return None
        return BreakerChange(CLOSED, failures)
    if current.state is HALF_OPEN and current.probe == me and tally.probe is not None:
        if tally.probe is Attempt.SUCCEEDED:
            return BreakerChange(CLOSED, 0, reason="probe succeeded")
        return BreakerChange(
            OPEN, current.failures + 1, opens=True, cooldown=cooldown, reason="probe failed"
        )
    return None  # OPEN: late outcomes of handlers that ran before it opened


def decide_channel(
    current: BreakerRecord,
    attempts: Sequence[tuple[Attempt, datetime | None]],
    *,
    threshold: int,
    cooldown: float,
) -> BreakerChange | None:
    """What a batch's attempts on one channel, (kind, claimed at) in order, change in
    the channel's breaker as stored, or None. While it is HALF_OPEN only the probe
    counts: the attempt claimed when the breaker became HALF_OPEN (the claim that let
    it through wrote its own time there); earlier ones ran before the breaker opened,
    and an OPEN breaker has no probe out."""
    if current.state is CLOSED:
        tally = Tally()
        for kind, _ in attempts:
            tally.add(kind, is_probe=False)
        return decide(current, tally, threshold=threshold, cooldown=cooldown, me="")
    since = current.changed_at
    if current.state is not HALF_OPEN or since is None:
        return None
    probes = [
        kind for kind, claimed_at in attempts if claimed_at is not None and claimed_at >= since
    ]
    if not probes:
        return None
    if probes[0] is Attempt.SUCCEEDED:
        return BreakerChange(CLOSED, 0, reason="probe succeeded")
    return BreakerChange(
        OPEN, current.failures + 1, opens=True, cooldown=cooldown, reason="probe failed"
    )


class Admission(enum.Enum):
    RUN = "run"
    #: back to the queue unstarted: its breaker is open, or half-open for another probe
    GIVE_BACK = "give back"
    #: failures waiting to be counted may open the breaker: wait for the count
    WAIT = "wait"


@dataclass
class QueueBreaker:
    """This process's view of one queue's breaker."""

    state: BreakerState = CLOSED
    failures: int = 0
    probe: str | None = None
    #: the id of the probe message this process claimed while it holds the probe
    probe_message: int | None = None
    #: failed attempts handed to the flusher and not yet counted in the database
    uncounted: int = 0
    #: changed by this process's own writes: a reading taken meanwhile is stale
    version: int = 0


def instance_id() -> str:
    """Who holds a probe: host, process and subscriber instance (at most 64 chars)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Breakers:
    """The breakers of one subscriber's queues (see the module docstring)."""

    engine: AsyncEngine
    driver: Driver
    queues: Sequence[str]
    threshold: int
    cooldown: float
    #: a HALF_OPEN breaker whose holder has been silent this long may be taken over
    silent_after: float
    log: Log
    #: called when a queue's breaker opens: its buffered messages go back unstarted
    on_opened: Callable[[str], None]
    #: wakes the fetcher (a breaker closed, or this process got a probe)
    wake: asyncio.Event
    #: whether a worker waits for a message now: only such a process takes a probe,
    #: so the probe never waits behind handlers that hang on the failing downstream
    has_idle_worker: Callable[[], bool]
    #: a channel's messages count toward the channel's own breaker, not the queue's
    per_channel: bool = False
    me: str = field(default_factory=instance_id)
    views: dict[str, QueueBreaker] = field(init=False)
    _changed: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    #: batches are counted one after another (the flusher writes two at once), so the
    #: views follow the database's order of decisions
    _counting: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.views = {queue: QueueBreaker() for queue in self.queues}

    # -- asked by the fetcher and the workers -----------------------------------------
    def claim_limit(self, queue: str, wanted: int) -> int:
        """How many of `wanted` messages the fetcher may claim from `queue` now."""
        view = self.views[queue]
        if view.state is CLOSED:
            # none while failures on their way to the database may open it
            return wanted if view.failures + view.uncounted < self.threshold else 0
        if view.state is HALF_OPEN and view.probe == self.me and view.probe_message is None:
            return 1
        return 0

    def _own_breaker(self, raw: ClaimedMessage) -> bool:
        """Whether `raw` counts toward its channel's breaker rather than the queue's."""
        return self.per_channel and raw.channel is not None

    def claimed(self, queue: str, messages: Sequence[ClaimedMessage]) -> bool:
        """Note a claim of `queue` that just returned; whether its messages must go back
        unstarted: the breaker opened, or another process took its probe, while the
        claim ran (the buffer was given back then, before they were in it)."""
        view = self.views[queue]
        if view.state is HALF_OPEN and view.probe == self.me:
            counted = [raw for raw in messages if not self._own_breaker(raw)]
            if counted:
                view.probe_message = counted[0].id
            return False
        return bool(messages) and view.state is not CLOSED

    def give_back(self, queue: str) -> None:
        """Give back, unstarted, what the buffer holds of `queue`: a claim `claimed`
        said must go back, once it is buffered."""
        self.on_opened(queue)

    def admits(self, raw: ClaimedMessage) -> Admission:
        view = self.views[raw.queue]
        if self._own_breaker(raw):
            # its channel's breaker let the claim take it (a HALF_OPEN queue breaker's
            # probe claims may bring such messages: they run, and are not its probe);
            # an open queue breaker gives back what the buffer holds (on_opened)
            return Admission.GIVE_BACK if view.state is OPEN else Admission.RUN
        if view.state is CLOSED:
            if view.failures + view.uncounted >= self.threshold:
                return Admission.WAIT
            return Admission.RUN
        if view.state is HALF_OPEN and view.probe == self.me and raw.id == view.probe_message:
            return Admission.RUN
        return Admission.GIVE_BACK

    async def changed(self, timeout: float) -> None:
        """Wait until a count is written or a reading changes a view (or `timeout`)."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def dropped(self, raw: ClaimedMessage) -> None:
        """`raw` left this process unhandled, with no outcome (its claim was lost in a
        failover, recovery.py): if it was this process's probe, another may be claimed."""
        view = self.views.get(raw.queue)
        if view is not None and view.probe_message == raw.id:
            view.probe_message = None
            self.wake.set()

    def handed(self, raw: ClaimedMessage, outcome: Outcome) -> None:
        """An outcome goes to the flusher: a failure is uncounted until written."""
        if not self._own_breaker(raw) and attempt_kind(raw, outcome) is Attempt.FAILED:
            self.views[raw.queue].uncounted += 1

    # -- after each written batch of outcomes (OutcomeFlusher.after_write) ------------
    async def count(self, outcomes: Sequence[Outcome], held: dict[int, ClaimedMessage]) -> None:
        tallies: dict[str, Tally] = {}
        by_channel: dict[tuple[str, str], list[tuple[Attempt, datetime | None]]] = {}
        for outcome in outcomes:
            raw = held.get(outcome.id)
            if raw is None or raw.queue not in self.views:
                continue
            kind = attempt_kind(raw, outcome)
            if self._own_breaker(raw):
                if kind is not None:
                    assert raw.channel is not None
                    by_channel.setdefault((raw.queue, raw.channel), []).append(
                        (kind, raw.acquired_at)
                    )
                continue
            view = self.views[raw.queue]
            is_probe = raw.id == view.probe_message
            if kind is None and not is_probe:
                continue
            tallies.setdefault(raw.queue, Tally()).add(kind, is_probe=is_probe)
        if tallies:
            async with self._counting:
                await self._count(tallies)
            self._notify()
        if by_channel:
            await self._count_channels(by_channel)

    async def _count_channels(
        self, by_channel: dict[tuple[str, str], list[tuple[Attempt, datetime | None]]]
    ) -> None:
        """Write what the batch changes in its channels' breakers. Successes change
        something only where a breaker counts failures or is not CLOSED: one read
        finds those, so a healthy batch costs that one read and no lock."""
        quiet: dict[str, list[str]] = {}
        for (queue, channel), attempts in by_channel.items():
            if all(kind is Attempt.SUCCEEDED for kind, _ in attempts):
                quiet.setdefault(queue, []).append(channel)
        counting: set[tuple[str, str]] = set()
        for queue, names in quiet.items():
            try:
                found = await with_retries(
                    self.driver,
                    partial(controls.channels_counting, self.driver, self.engine, queue, names),
                )
            except Exception as exc:
                self.log(logging.WARNING, f"reading channels' circuit breakers failed: {exc!r}")
                continue
            counting.update((queue, name) for name in found)
        for (queue, channel), attempts in by_channel.items():
            if channel in quiet.get(queue, ()) and (queue, channel) not in counting:
                continue
            try:
                await self._count_channel(queue, channel, attempts)
            except Exception as exc:
                self.log(
                    logging.WARNING,
                    f"counting failures for the circuit breaker of channel {channel!r} of "
                    f"queue {queue!r} failed: {exc!r}",
                )

    async def _count_channel(
        self, queue: str, channel: str, attempts: list[tuple[Attempt, datetime | None]]
    ) -> None:
        def judge(current: BreakerRecord) -> BreakerChange | None:
            return decide_channel(
                current, attempts, threshold=self.threshold, cooldown=self.cooldown
            )

        changed = await with_retries(
            self.driver,
            lambda: controls.change_breaker(
                self.driver, self.engine, BreakerDecision(queue, judge, channel=channel)
            ),
        )
        assert changed is not None  # the row is inserted when missing
        before, after = changed
        if after.state is before.state:
            return
        if after.state is OPEN:
            reason = (
                "its probe failed"
                if before.state is not CLOSED
                else f"{after.failures} consecutive failures"
            )
            self.log(
                logging.WARNING,
                f"circuit breaker of channel {channel!r} of queue {queue!r} is OPEN after "
                f"{reason}: none of its messages are claimed for {self.cooldown:g}s, "
                "then one probe",
            )
        else:
            self.log(
                logging.INFO,
                f"circuit breaker of channel {channel!r} of queue {queue!r} is "
                f"{after.state.value}: its probe succeeded",
            )

    async def _count(self, tallies: dict[str, Tally]) -> None:
        for queue, tally in tallies.items():
            view = self.views[queue]
            try:
                if tally.probe_settled and tally.probe is None:
                    view.probe_message = None  # spent without a verdict: probe another
                    self.wake.set()
                if (
                    tally.failures
                    or tally.probe is not None
                    or (tally.succeeded and (view.failures or view.state is not CLOSED))
                ):
                    await self._write(queue, tally)
            except Exception as exc:
                self.log(
                    logging.WARNING,
                    f"counting failures for the circuit breaker of queue {queue!r} failed: {exc!r}",
                )
            finally:
                if tally.failures:
                    view.uncounted = max(0, view.uncounted - tally.failures)
                    self.wake.set()  # the fetcher held back while they were uncounted

    async def _write(self, queue: str, tally: Tally) -> None:
        def judge(current: BreakerRecord) -> BreakerChange | None:
            return decide(
                current, tally, threshold=self.threshold, cooldown=self.cooldown, me=self.me
            )

        changed = await with_retries(
            self.driver,
            lambda: controls.change_breaker(
                self.driver, self.engine, BreakerDecision(queue, judge)
            ),
        )
        assert changed is not None  # the row is inserted when missing
        before, after = changed
        view = self.views[queue]
        view.version += 1
        self._apply(queue, after)
        if after.state is not before.state:
            if after.state is OPEN:
                reason = (
                    "its probe failed"
                    if before.state is HALF_OPEN
                    else f"{after.failures} consecutive failures"
                )
                self.log(
                    logging.WARNING,
                    f"circuit breaker of queue {queue!r} is OPEN after {reason}: no claims "
                    f"for {self.cooldown:g}s, then one probe",
                )
            else:
                self.log(
                    logging.INFO,
                    f"circuit breaker of queue {queue!r} is CLOSED: its probe succeeded",
                )

    def _apply(self, queue: str, record: BreakerRecord) -> None:
        """Make the view of `queue` what the database holds."""
        view = self.views[queue]
        was = view.state
        view.state, view.failures, view.probe = record.state, record.failures, record.probe
        if not (record.state is HALF_OPEN and record.probe == self.me):
            view.probe_message = None
        if record.state is OPEN:
            if was is not OPEN:
                self.on_opened(queue)
        elif record.state is HALF_OPEN and was is CLOSED and record.probe != self.me:
            # it opened and another process took the probe between two reads here: what
            # the buffer holds of the queue may not run here, and the probe may be among it
            self.on_opened(queue)
        elif record.state is not was:
            self.wake.set()  # claimable again, or by this process's probe

    # -- every ControlWatcher turn ------------------------------------------------------
    def versions(self) -> dict[str, int]:
        return {queue: view.version for queue, view in self.views.items()}

    async def observe(self, readings: dict[str, ControlReading], versions: dict[str, int]) -> None:
        """Take what the watcher read; take the probe where a reopening is due or a
        holder fell silent; show this process holds its probes."""
        for queue, view in self.views.items():
            reading = readings.get(queue)
            record = reading.breaker if reading is not None else BreakerRecord()
            if view.version == versions[queue] and (
                record.state is not view.state
                or record.probe != view.probe
                or record.failures != view.failures
            ):
                if record.state is not view.state:
                    self.log(
                        logging.INFO, f"circuit breaker of queue {queue!r} is {record.state.value}"
                    )
                self._apply(queue, record)
            if reading is None:
                continue
            if reading.reopening_due:
                if self.has_idle_worker():
                    await self._take_probe(queue, None)
            elif reading.probe_silent and record.probe != self.me:
                if self.has_idle_worker():
                    await self._take_probe(queue, self.silent_after)
            elif record.state is HALF_OPEN and record.probe == self.me:
                await with_retries(
                    self.driver,
                    partial(controls.keep_probe, self.driver, self.engine, queue, self.me),
                )
        self._notify()

    async def hand_back_probes(self) -> None:
        """At stop, after the final flush: probes this instance still holds go back."""
        for queue, view in self.views.items():
            if view.state is HALF_OPEN and view.probe == self.me:
                await with_retries(
                    self.driver,
                    partial(controls.hand_back_probe, self.driver, self.engine, queue, self.me),
                )

    async def _take_probe(self, queue: str, silent_after: float | None) -> None:
        won = await with_retries(
            self.driver,
            lambda: controls.take_probe(
                self.driver, self.engine, queue, self.me, silent_after=silent_after
            ),
        )
        if not won:
            return
        view = self.views[queue]
        view.version += 1
        view.state, view.probe, view.probe_message = HALF_OPEN, self.me, None
        why = "its holder fell silent" if silent_after is not None else "its cooldown is over"
        self.log(
            logging.INFO,
            f"circuit breaker of queue {queue!r} is HALF_OPEN ({why}): "
            "this process claims one message as the probe",
        )
        self.wake.set()
