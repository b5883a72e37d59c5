"""The subscriber: composes the fetch, worker, flush, lease and release-stuck loops."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pydantic
from faststream._internal.endpoint.subscriber import SubscriberUsecase
from faststream._internal.endpoint.utils import process_msg
from faststream.exceptions import AckMessage, NackMessage, RejectMessage, StopConsume
from faststream.message import AckStatus
from typing_extensions import override

from faststream_sqla import lifecycle, ordering
from faststream_sqla._faststream import set_auto_ack_disabled
from faststream_sqla.admin import controls
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.dialects.base import Outcome, reading, with_retries
from faststream_sqla.exceptions import HandlerTimeoutError, InvalidOptionError, RetryAfter
from faststream_sqla.message import KEEP_STATE, ClaimedMessage, validate_delay
from faststream_sqla.parser import SqlaBatchParser, SqlaParser, claimed_from_row
from faststream_sqla.publisher.fake import SqlaFakePublisher
from faststream_sqla.schema import validate_queue_name

from .breaker import Admission, Breakers
from .loops import (
    CONTROL_INTERVAL,
    DELIVERIES_PER_YIELD,
    ControlWatcher,
    Fetcher,
    LeaseKeeper,
    OutcomeFlusher,
    PrefetchBuffer,
    StoppableLoop,
    StuckReleaser,
    flush_batch_size,
    wait_event,
)
from .stall import DEFAULT_THRESHOLD as DEFAULT_STALL_THRESHOLD

if TYPE_CHECKING:
    from faststream._internal.endpoint.publisher import PublisherProto
    from faststream._internal.endpoint.subscriber import SubscriberSpecification
    from faststream._internal.endpoint.subscriber.call_item import CallsCollection
    from faststream._internal.types import BrokerMiddleware
    from faststream.message import StreamMessage

    from faststream_sqla.broker.config import SqlaBrokerConfig
    from faststream_sqla.message import SqlaMessage

    from .config import SqlaSubscriberConfig

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


class SqlaSubscriber(SubscriberUsecase[Any]):
    """Consumes one or more database queues with `max_workers` concurrent handlers.

    With `batch=True` a handler call receives every message waiting in the prefetch
    buffer, up to `fetch_batch_size`, as one list.
    """

    _outer_config: SqlaBrokerConfig

    def __init__(
        self,
        config: SqlaSubscriberConfig,
        specification: SubscriberSpecification[Any, Any],
        calls: CallsCollection[Any],
    ) -> None:
        parser = SqlaBatchParser() if config.batch else SqlaParser()
        config.parser = parser.parse_message
        config.decoder = (
            parser.decode_batch if isinstance(parser, SqlaBatchParser) else parser.decode_message
        )
        super().__init__(config, specification, calls)
        self._config = config
        self._queues = config.queues
        self.batch = config.batch
        self.options = config.options
        self._own_middlewares = tuple(config.middlewares)
        self._tasks: list[asyncio.Task[Any]] = []
        self._workers: list[asyncio.Task[Any]] = []
        self._buffer = PrefetchBuffer()
        self._wake = asyncio.Event()
        #: set when stop() begins: workers waiting out an outage give up then
        self._stopping = asyncio.Event()
        #: claimed and not yet settled in the database: the leases this process keeps
        self._held: dict[int, ClaimedMessage] = {}
        #: whether a message with an ordering key was ever claimed here
        self._keyed = False
        self._fetcher: Fetcher | None = None
        self._flusher: OutcomeFlusher | None = None
        #: the circuit breakers of the queues, when circuit_breaker_threshold is set
        self._breakers: Breakers | None = None
        #: per queue, what get_one() last read of its controls: (when, paused, channelled)
        self._pulled_controls: dict[str, tuple[float, bool, bool]] = {}
        self._loops: list[StoppableLoop] = []
        #: the message each worker task is delivering, for the stall watch
        self._running: dict[asyncio.Task[Any], ClaimedMessage] = {}

    @property
    def _broker_middlewares(self) -> Sequence[BrokerMiddleware[Any]]:
        # FastStream 0.7 keeps middlewares on brokers and routers; a subscriber's own
        # run inside them, closest to the handler.
        return (*self._outer_config.broker_middlewares, *self._own_middlewares)

    # -- addressing -------------------------------------------------------------------
    @property
    def queues(self) -> tuple[str, ...]:
        prefix = self._outer_config.prefix
        return tuple(f"{prefix}{q}" for q in self._queues)

    def get_log_context(self, message: StreamMessage[Any] | None) -> dict[str, Any]:
        """The fields of every log line about `message` (LogRecord attributes, so a JSON
        formatter sees them): queue, message id, attempt (1 for the first) and
        correlation id. A batch's are its first message's, its id the range of ids."""
        # called for every message: the common case must not rebuild the queue list
        if message is not None:
            raw = message.raw_message
            if isinstance(raw, list) and raw:
                raw = raw[0]
            if isinstance(raw, ClaimedMessage):
                return {
                    "queue": raw.queue,
                    "message_id": str(message.message_id),
                    "attempt": raw.attempts_count + 1,
                    "correlation_id": raw.correlation_id or "",
                }
        return {
            "queue": ",".join(self.queues),
            "message_id": str(getattr(message, "message_id", "")),
            "attempt": "",
            "correlation_id": "",
        }

    def _log(
        self,
        log_level: int | None,
        message: str,
        extra: dict[str, Any] | None = None,
        exc_info: BaseException | None = None,
    ) -> None:
        fields = self.get_log_context(None)
        if extra:
            fields = {**fields, **extra}
        self._outer_config.logger.log(message, log_level, extra=fields, exc_info=exc_info)

    def _make_response_publisher(self, message: StreamMessage[Any]) -> Iterable[PublisherProto]:
        return (SqlaFakePublisher(self._outer_config.producer, queue=message.reply_to),)

    # -- lifecycle --------------------------------------------------------------------
    @override
    def _post_start(self) -> None:
        # A router's subscriber learns the broker's ack_policy only once included;
        # FastStream read it at construction, so read it again now.
        self.ack_policy = self._config.ack_policy
        set_auto_ack_disabled(self, self._config.auto_ack_disabled)
        super()._post_start()

    @override
    async def start(self) -> None:
        for queue in self.queues:  # router prefixes are known only now
            validate_queue_name(queue)
        await super().start()
        if self._outer_config.in_memory:  # TestSqlaBroker: started after the broker
            for call in self.calls:
                call.handler.set_test()
        elif self.calls:
            self._start_loops()
        self._post_start()

    def _start_loops(self) -> None:
        engine, dialect, opts = self._outer_config.engine, self._outer_config.dialect, self.options
        self._buffer = PrefetchBuffer()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._held = {}
        claiming = asyncio.Lock()
        self._fetcher = Fetcher(
            engine=engine,
            dialect=dialect,
            queues=self.queues,
            options=opts,
            buffer=self._buffer,
            wake=self._wake,
            on_claimed=self._hold,
            on_resized=self._claim_resized,
            unsettled=self._held.__len__,
            claiming=claiming,
            log=self._log,
            health=self._outer_config.health,
            on_short_claim=self._free_held_slots,
        )
        if self.batch:
            self._fetcher.per_worker = opts.fetch_batch_size
        self._flusher = OutcomeFlusher(
            engine=engine,
            dialect=dialect,
            interval=opts.flush_interval,
            batch_size=flush_batch_size(self._fetcher.batch_size, opts),
            on_written=self._release_held,
            after_write=self._after_write,
            log=self._log,
            health=self._outer_config.health,
        )
        self._breakers = None
        if opts.circuit_breaker_threshold is not None:
            self._breakers = self._fetcher.breakers = Breakers(
                engine=engine,
                dialect=dialect,
                queues=self.queues,
                threshold=opts.circuit_breaker_threshold,
                cooldown=opts.circuit_breaker_cooldown,
                # the holder refreshes its hold every watcher turn; after it dies, its
                # probe message's lease lapses too
                silent_after=max(opts.circuit_breaker_cooldown, 3 * CONTROL_INTERVAL)
                + opts.release_stuck_timeout,
                log=self._log,
                on_opened=self._give_back_buffered,
                wake=self._wake,
                has_idle_worker=lambda: self._buffer.idle_workers > 0,
                per_channel=opts.circuit_breaker_per_channel,
            )
        releaser = StuckReleaser(
            engine=engine,
            dialect=dialect,
            queues=self.queues,
            options=opts,
            held=self._held,
            claiming=claiming,
            on_released=self._wake.set,
            log=self._log,
            health=self._outer_config.health,
        )
        leases = LeaseKeeper(
            engine=engine,
            dialect=dialect,
            held=self._held,
            interval=opts.release_stuck_timeout / 3,
            log=self._log,
            health=self._outer_config.health,
        )
        watcher = ControlWatcher(
            engine=engine,
            dialect=dialect,
            queues=self.queues,
            fetcher=self._fetcher,
            wake=self._wake,
            log=self._log,
            health=self._outer_config.health,
            breakers=self._breakers,
        )
        self._loops = [self._flusher, releaser, leases, watcher]
        self._outer_config.wakeups.register(self.queues, self._wake)
        self._tasks = [
            self._spawn(self._fetcher.run(), "fetch"),
            self._spawn(self._flusher.run(), "flush"),
            self._spawn(releaser.run(), "release-stuck"),
            self._spawn(leases.run(), "leases"),
            self._spawn(watcher.run(), "controls"),
        ]
        self._workers = [self._spawn(self._work(), f"worker-{i}") for i in range(opts.max_workers)]
        self._running = {}
        # Report a blocked event loop well before a lease could lapse over it.
        threshold = min(DEFAULT_STALL_THRESHOLD, opts.release_stuck_timeout / 3)
        for task in self._workers:
            self._outer_config.stall_watch.watch(task, self._describe_delivery(task), threshold)

    def _describe_delivery(self, task: asyncio.Task[Any]) -> Callable[[], str | None]:
        """What `task` (a worker) is delivering, for the stall watch's report."""
        handlers = ", ".join(repr(call.name) for call in self.calls) or "none"

        def describe() -> str | None:
            raw = self._running.get(task)
            if raw is None:
                return None
            return f"handler {handlers} (queue {raw.queue!r}, message {raw.id})"

        return describe

    def _hold(self, claimed: Sequence[ClaimedMessage]) -> None:
        held = self._held
        for raw in claimed:
            held[raw.id] = raw
            if raw.ordering_key is not None:
                self._keyed = True

    async def _after_write(self, outcomes: Sequence[Outcome]) -> None:
        try:
            await self._release_keys(outcomes)
        finally:
            if self._breakers is not None:
                await self._breakers.count(outcomes, self._held)

    def _give_back_buffered(self, queue: str) -> None:
        """The queue's breaker opened: its messages waiting in the buffer go back to the
        queue unstarted (no attempt, no delivery spent), as at shutdown."""
        if self._flusher is None:
            return
        for raw in self._buffer.take_where(lambda raw: raw.queue == queue):
            self._flusher.add(lifecycle.released(raw, started=False))
        if self._fetcher is not None:
            self._fetcher.notify_taken()

    async def _release_keys(self, outcomes: Sequence[Outcome]) -> None:
        """Once outcomes are committed: the next message of each ordering key whose
        message was archived may be claimed (faststream_sqla.ordering)."""
        if not self._keyed:
            return
        held = self._held
        keys = {
            (raw.queue, raw.ordering_key)
            for outcome in outcomes
            if (raw := held.get(outcome.id)) is not None
            and raw.ordering_key is not None
            and outcome.archives
        }
        if keys:
            config = self._outer_config
            await with_retries(
                config.dialect, lambda: ordering.release_next(config.dialect, config.engine, keys)
            )

    def _claim_resized(self, claim_size: int) -> None:
        # outcomes are written a claim's worth at a time, whatever the claim's size
        if self._flusher is not None:
            self._flusher.batch_size = flush_batch_size(claim_size, self.options)

    def _free_held_slots(self) -> None:
        """A channelled claim came back short of its idle workers: handled messages
        whose outcomes wait for the flusher still count in flight, and may hold the
        slots of the channels it could not serve. Write them now, not at the end of
        flush_interval (once written, `_release_held` wakes the fetcher)."""
        if self._flusher is not None:
            self._flusher.write_soon()

    def _release_held(self, outcomes: Sequence[Outcome]) -> None:
        held, freed_key = self._held, False
        for outcome in outcomes:
            raw = held.pop(outcome.id, None)
            if raw is not None and raw.ordering_key is not None and outcome.archives:
                freed_key = True
        if freed_key:
            # The next message of the key is claimable now, and no publish will say so:
            # claim again instead of waiting for max_fetch_interval.
            self._outer_config.wakeups.wake(self.queues)
        elif self._fetcher is not None and self._fetcher.channelled and outcomes:
            # a channel's slot is free now: claim for the idle workers
            self._wake.set()
        self._outer_config.vacuum.note_settled(len(outcomes))
        if self._fetcher is not None:
            self._fetcher.notify_taken()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"faststream-sqla:{','.join(self.queues)}:{name}")
        task.add_done_callback(self._on_loop_done)
        return task

    def _on_loop_done(self, task: asyncio.Task[Any]) -> None:
        # Loops catch their own errors; reaching here with one is a bug worth shouting.
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._log(logging.CRITICAL, f"{task.get_name()} crashed: {exc!r}", exc_info=exc)

    @override
    async def stop(self) -> None:
        """Graceful stop: unstarted messages go back, running ones get graceful_timeout."""
        if not self._tasks:
            await super().stop()
            return
        self.running = False
        self._stopping.set()
        self._outer_config.wakeups.unregister(self.queues, self._wake)
        for task in self._workers:
            self._outer_config.stall_watch.unwatch(task)
        fetch_task, *others = self._tasks
        assert self._fetcher is not None and self._flusher is not None

        # 1. Stop claiming; a claim in flight is let finish so its rows get released too.
        self._fetcher.stopping = True
        self._wake.set()
        self._fetcher.space.set()
        done, _ = await asyncio.wait({fetch_task}, timeout=5.0)
        if not done:
            fetch_task.cancel()

        # 2. Prefetched messages never started: back to PENDING, delivery not counted.
        while self._buffer:
            if (raw := self._buffer.take()) is not None:
                self._flusher.add(lifecycle.released(raw, started=False))
        for _ in self._workers:
            self._buffer.put(None)

        # 3. Running handlers get graceful_timeout; then they are cancelled and released.
        if self._workers:
            _, running = await asyncio.wait(
                self._workers, timeout=self._outer_config.graceful_timeout
            )
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)

        # 4. Final flush of every finished outcome; leases are kept until then. The loops
        # finish their current statement rather than being cancelled inside it.
        for loop in self._loops:
            loop.request_stop()
        _, stuck = await asyncio.wait({*others, *self._flusher.in_flight}, timeout=10.0)
        for task in stuck:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._final_flush()
        if self._breakers is not None:
            try:
                await self._breakers.hand_back_probes()
            except Exception as exc:
                self._log(logging.WARNING, f"handing back circuit breaker probes: {exc!r}")
        self._tasks, self._workers = [], []
        await super().stop()

    async def _final_flush(self) -> None:
        """Write every finished outcome, retrying for up to graceful_timeout."""
        assert self._flusher is not None
        timeout = self._outer_config.graceful_timeout
        # None means "no limit" for handlers; a database that stays down must still not
        # hold the process forever, so the flush gets a generous cap then.
        deadline = time.monotonic() + (max(timeout, 1.0) if timeout is not None else 60.0)
        delay = 0.05
        while not await self._flusher.flush():
            if time.monotonic() + delay > deadline:
                self._log(
                    logging.ERROR,
                    f"{len(self._flusher.pending)} outcomes could not be written at shutdown; "
                    "their messages will be delivered again after release_stuck_timeout",
                )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- processing -------------------------------------------------------------------
    def _take_batch(self, first: ClaimedMessage) -> list[ClaimedMessage]:
        batch = [first]
        buffer = self._buffer
        while buffer and len(batch) < self.options.fetch_batch_size:
            raw = buffer.take()
            if raw is None:  # a stop sentinel: leave it for the next round
                buffer.put_back(None)
                break
            batch.append(raw)
        return batch

    async def _work(self) -> None:
        assert self._fetcher is not None and self._flusher is not None
        buffer, fetcher, flusher = self._buffer, self._fetcher, self._flusher
        running, me = self._running, asyncio.current_task()
        assert me is not None  # workers run as tasks (_spawn)
        health = self._outer_config.health
        breakers = self._breakers
        delivered = 0
        while True:
            # The common case, a buffered message, costs a popleft; only an empty
            # buffer makes the worker wait.
            raw = buffer.take() if buffer else await buffer.get()
            if raw is None:
                return
            if health.is_down and self.running:
                # The database is gone: a handler would fail on it and spend an attempt.
                # The message stays claimed here until it answers (or we stop).
                buffer.put_back(raw)
                await health.until_reachable(self._stopping)
                continue
            if breakers is not None and self.running:
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
            batch = self._take_batch(raw) if self.batch else None
            if batch is not None and breakers is not None:
                batch = self._admitted(batch, breakers)
            fetcher.notify_taken()
            if not self.running:  # stopping: messages not yet started go back
                for item in batch or (raw,):
                    flusher.add(lifecycle.released(item, started=False))
                continue
            try:
                if batch is None:
                    await self._deliver_one(raw)
                else:
                    await self._deliver(batch)
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
                self._log(logging.CRITICAL, f"delivery failed unexpectedly: {exc!r}", exc_info=exc)
                for item in batch or (raw,):
                    flusher.add(lifecycle.released(item, started=True))

    def _admitted(self, batch: list[ClaimedMessage], breakers: Breakers) -> list[ClaimedMessage]:
        """The messages of a batch its breakers let run (the first one was let); the
        others go back unstarted."""
        assert self._flusher is not None
        admitted = [batch[0]]
        for raw in batch[1:]:
            if breakers.admits(raw) is Admission.RUN:
                admitted.append(raw)
            else:
                self._flusher.add(lifecycle.released(raw, started=False))
        return admitted

    async def _deliver_one(self, raw: ClaimedMessage) -> None:
        """`_deliver` for one message, without the lists: this runs per message."""
        assert self._flusher is not None
        opts = self.options
        if opts.max_deliveries is not None and raw.deliveries_count > opts.max_deliveries:
            self._flusher.add(lifecycle.deliveries_exceeded(raw, opts.max_deliveries))
            return
        started = time.monotonic()
        if raw.expires_at is not None and lifecycle.is_expired(raw, started):
            self._flusher.add(lifecycle.expired(raw))
            return
        try:
            error = await self._run_handler_in_time(raw, (raw,))
        except asyncio.CancelledError:
            # Shutdown cut the handler short: not its fault, so no attempt is spent.
            self._flusher.add(told(raw, lifecycle.released(raw, started=True)))
            raise
        if error is not None and await self._held_for_outage((raw,), error):
            return
        outcome = self._outcome(raw, started, error)
        if raw.on_outcome is not None:  # checked here: this runs per message
            told(raw, outcome)
        if self._breakers is not None:
            self._breakers.handed(raw, outcome)
        self._flusher.add(outcome)
        if raw.ordering_key is not None:
            # the key's next message is claimable only once this outcome is written
            self._flusher.write_soon()

    async def _deliver(self, batch: list[ClaimedMessage]) -> None:
        """Run the handler on `batch`; its outcomes are handed to the flusher together at
        the end, so an unexpected error leaves none of them half-settled."""
        assert self._flusher is not None
        opts = self.options
        settled: list[Outcome] = []
        live = []
        started = time.monotonic()
        for raw in batch:
            if opts.max_deliveries is not None and raw.deliveries_count > opts.max_deliveries:
                settled.append(lifecycle.deliveries_exceeded(raw, opts.max_deliveries))
            elif raw.expires_at is not None and lifecycle.is_expired(raw, started):
                settled.append(lifecycle.expired(raw))
            else:
                live.append(raw)
        error: BaseException | None = None
        if live:
            try:
                error = await self._run_handler_in_time(live, live)
            except asyncio.CancelledError:
                settled += (told(raw, lifecycle.released(raw, started=True)) for raw in live)
                self._flusher.add_all(settled)
                raise
            if error is not None and await self._held_for_outage(live, error):
                live = []
        for raw in live:  # per message: the observer's call only where there is one
            outcome = self._outcome(raw, started, error)
            settled.append(outcome if raw.on_outcome is None else told(raw, outcome))
        if self._breakers is not None:
            held = self._held
            for outcome in settled:
                if (handed := held.get(outcome.id)) is not None:
                    self._breakers.handed(handed, outcome)
        self._flusher.add_all(settled)
        if any(raw.ordering_key is not None for raw in batch):
            self._flusher.write_soon()  # as in _deliver_one

    async def _run_handler_in_time(
        self, message: ClaimedMessage | list[ClaimedMessage], live: Sequence[ClaimedMessage]
    ) -> BaseException | None:
        """`_run_handler`, cancelled after the subscriber's handler_timeout (a failed
        attempt). A cancellation from outside (shutdown) still propagates."""
        timeout = self.options.handler_timeout
        if timeout is None:
            return await self._run_handler(message, live)
        try:
            return await asyncio.wait_for(self._run_handler(message, live), timeout)
        except asyncio.TimeoutError:
            for raw in live:  # whatever the handler decided before it was cut off
                if raw.decision is not AckStatus.ACKED:
                    raw.decision = None
            return HandlerTimeoutError(
                f"the handler ran longer than handler_timeout={timeout:g}s and was cancelled"
            )

    async def _run_handler(
        self, message: ClaimedMessage | list[ClaimedMessage], live: Sequence[ClaimedMessage]
    ) -> BaseException | None:
        """FastStream's consume path for one message or a batch; returns the error to
        record on the attempt, if any."""
        try:
            await self.process_message(message)
        except (AckMessage, NackMessage, RejectMessage) as exc:
            return self._take_raised_decision(live, exc)
        except StopConsume:
            asyncio.get_running_loop().create_task(self.stop())
        except SystemExit:
            asyncio.get_running_loop().create_task(self.stop())
            if app := self._outer_config.context.get("app"):
                app.exit()
        except Exception as exc:
            self._classify(live, exc)
            return exc
        return None

    async def _held_for_outage(self, live: Sequence[ClaimedMessage], error: BaseException) -> bool:
        """Whether the handler failed because the broker's database is gone: then its
        messages go back to the front of the buffer, their attempt not spent, to run
        again once the database answers. A message the handler acked keeps its ack."""
        if any(raw.decision is AckStatus.ACKED for raw in live):
            return False
        if not await self._outer_config.health.confirms_outage(error):
            return False
        for raw in reversed(live):
            raw.decision, raw.nack_delay = None, None
            told(raw, None)
            self._buffer.put_back(raw)
        return True

    def _classify(self, live: Sequence[ClaimedMessage], exc: Exception) -> None:
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

    def _outcome(self, raw: ClaimedMessage, started: float, error: BaseException | None) -> Outcome:
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
    def _take_raised_decision(
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

    # -- pulling without a handler ----------------------------------------------------
    async def _write_now(self, outcome: Outcome, raw: ClaimedMessage) -> None:
        dialect, engine = self._outer_config.dialect, self._outer_config.engine

        async def write() -> int:
            if outcome.saved_state is not KEEP_STATE:
                await dialect.save_states(engine, [outcome])
            return await dialect.write_outcomes(engine, [outcome])

        await with_retries(dialect, write)
        if raw.ordering_key is not None and outcome.archives:
            keys = {(raw.queue, raw.ordering_key)}
            await with_retries(dialect, lambda: ordering.release_next(dialect, engine, keys))

    async def _settle_now(self, raw: ClaimedMessage) -> None:
        now = lifecycle.db_time(raw, time.monotonic())
        await self._write_now(
            lifecycle.after_attempt(
                raw,
                started_at=now,
                finished_at=now,
                error=None,
                retry_strategy=self.options.retry_strategy,
            ),
            raw,
        )

    async def _pull_controls(self, queue: str, *, fresh: bool = False) -> tuple[bool, bool]:
        """Whether `queue` is paused and whether the channel claim serves it, as a
        pull sees them: read at most once per CONTROL_INTERVAL, as consumers with
        handlers read them (ControlWatcher), unless `fresh`."""
        now = time.monotonic()
        seen = self._pulled_controls.get(queue)
        if not fresh and seen is not None and now - seen[0] < CONTROL_INTERVAL:
            return seen[1], seen[2]
        dialect, engine = self._outer_config.dialect, self._outer_config.engine
        async with reading(engine) as conn:
            paused = bool(await controls.paused_among(conn, dialect.tables, [queue]))
            channelled = bool(await controls.channelled_among(conn, dialect.tables, [queue]))
        self._pulled_controls[queue] = (now, paused, channelled)
        return paused, channelled

    async def _claim_one(self) -> ClaimedMessage | None:
        dialect, engine, opts = self._outer_config.dialect, self._outer_config.engine, self.options
        for queue in self.queues:

            async def claim(queue: str = queue) -> list[Any]:
                paused, channelled = await self._pull_controls(queue)
                if paused:
                    return []
                if not channelled:
                    rows = await dialect.claim(engine, queue, 1)
                    if rows:
                        return rows
                    # nothing without a channel: it may have channelled messages now
                    paused, channelled = await self._pull_controls(queue, fresh=True)
                    if paused or not channelled:
                        return []
                # within the queue's limits and its channels', in their turns
                return await claim_channelled(
                    dialect,
                    engine,
                    queue,
                    1,
                    channel_breakers=opts.circuit_breaker_per_channel,
                )

            while rows := await with_retries(dialect, claim):
                raw = claimed_from_row(rows[0], time.monotonic())
                if opts.max_deliveries is not None and raw.deliveries_count > opts.max_deliveries:
                    await self._write_now(
                        lifecycle.deliveries_exceeded(raw, opts.max_deliveries), raw
                    )
                    continue
                if lifecycle.is_expired(raw, time.monotonic()):
                    await self._write_now(lifecycle.expired(raw), raw)
                    continue
                raw.settle = self._settle_now
                return raw
        return None

    @override
    async def get_one(self, *, timeout: float = 5.0) -> SqlaMessage | None:
        """Claim one message without a handler; settle it with ack/nack/reject.

        Nobody keeps its lease: an unsettled message goes back to the queue when a
        running subscriber of that queue next releases stuck messages.
        """
        assert not self.calls, "get_one() is for subscribers without a handler"
        wake = asyncio.Event()
        self._outer_config.wakeups.register(self.queues, wake)
        try:
            deadline = time.monotonic() + timeout
            while True:
                wake.clear()
                raw = await self._claim_one()
                if raw is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                await wait_event(wake, min(remaining, self.options.max_fetch_interval))
        finally:
            self._outer_config.wakeups.unregister(self.queues, wake)
        parser, decoder = self._get_parser_and_decoder()
        context = self._outer_config.context
        msg = await process_msg(
            msg=raw,
            middlewares=(m(raw, context=context) for m in self._broker_middlewares),
            parser=SqlaParser().parse_message if self.batch else parser,
            decoder=SqlaParser().decode_message if self.batch else decoder,
        )
        # not None for a message given; our parsers make SqlaMessages
        return cast("SqlaMessage", msg)

    @override
    async def __aiter__(self) -> AsyncIterator[SqlaMessage]:
        while True:
            msg = await self.get_one(timeout=3600.0)
            if msg is not None:
                yield msg
