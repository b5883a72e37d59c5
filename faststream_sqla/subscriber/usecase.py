"""The subscriber: starts and stops its parts and wires them together.

Its parts, each in a module of its own: the fetcher (claims into the prefetch buffer,
through the Claimer), the delivery (what each worker does with a message), the outcome
flusher, the upkeep loops (release stuck, leases, controls), the circuit breakers, and
the pull path of get_one()."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from faststream._internal.endpoint.subscriber import SubscriberUsecase
from faststream._internal.endpoint.utils import process_msg
from typing_extensions import override

from faststream_sqla import lifecycle, ordering
from faststream_sqla._faststream import set_auto_ack_disabled
from faststream_sqla.drivers.base import Outcome, with_retries
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.parser import SqlaBatchParser, SqlaParser
from faststream_sqla.publisher.fake import SqlaFakePublisher
from faststream_sqla.schema import validate_queue_name
from faststream_sqla.stall import DEFAULT_THRESHOLD as DEFAULT_STALL_THRESHOLD
from faststream_sqla.worker_registry import ConsumerLoad

from .breaker import Breakers
from .buffer import PrefetchBuffer
from .claimer import Claimer
from .delivery import Delivery
from .fetcher import Fetcher
from .flusher import OutcomeFlusher, flush_batch_size
from .loops import StoppableLoop
from .pull import Pull
from .recovery import ClaimRecovery, WrittenClaims
from .upkeep import CONTROL_INTERVAL, ControlWatcher, LeaseKeeper, StuckReleaser

if TYPE_CHECKING:
    from faststream._internal.endpoint.publisher import PublisherProto
    from faststream._internal.endpoint.subscriber import SubscriberSpecification
    from faststream._internal.endpoint.subscriber.call_item import CallsCollection
    from faststream._internal.types import BrokerMiddleware
    from faststream.message import StreamMessage

    from faststream_sqla.broker_config import SqlaBrokerConfig
    from faststream_sqla.message import SqlaMessage

    from .config import SqlaSubscriberConfig


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
        #: topic patterns bound to each of the queues when the broker starts
        self.topics = config.topics
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
        #: (id, token) of copies handed to workers whose rows this process claimed
        #: again under another token: their outcomes let go of nothing held
        self._superseded: set[tuple[int, int]] = set()
        #: whether a message with an ordering key was ever claimed here
        self._keyed = False
        self._fetcher: Fetcher | None = None
        self._flusher: OutcomeFlusher | None = None
        self._delivery: Delivery | None = None
        #: the circuit breakers of the queues, when circuit_breaker_threshold is set
        self._breakers: Breakers | None = None
        self._pull = Pull(lambda: self._outer_config, self.queues, self.options)
        self._loops: list[StoppableLoop] = []
        #: the claims whose outcomes this process wrote lately (subscriber.recovery)
        self._written = WrittenClaims(self.options.release_stuck_timeout)
        #: releases them when an outage ends, if the database forgot their outcomes
        self._recovery: ClaimRecovery | None = None
        #: this subscriber's part of its process's row in the workers table
        self._load: ConsumerLoad | None = None

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

    @property
    def bindings(self) -> list[tuple[str, str]]:
        """(pattern, queue) for each of `topics` and each queue: what the broker binds
        when it starts (never unbound on stop: unbinding is the operator's)."""
        return [(pattern, queue) for queue in self.queues for pattern in self.topics]

    def get_log_context(self, message: StreamMessage[Any] | None) -> dict[str, Any]:
        """The fields of every log line about `message` (LogRecord attributes, so a JSON
        formatter sees them): queue, message id, attempt (1 for the first) and
        correlation id. A batch's are its first message's, its id the range of ids."""
        # called for every message: the common case must not rebuild the queue list
        if message is not None:
            raw = message.raw_message
            if raw.__class__ is list and raw:  # a batch: its first message's
                raw = raw[0]
            if raw.__class__ is ClaimedMessage:
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
        engine, driver, opts = self._outer_config.engine, self._outer_config.driver, self.options
        self._buffer = PrefetchBuffer()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._held = {}
        self._superseded = set()
        claiming = asyncio.Lock()
        self._claimer = Claimer(driver, engine, channel_breakers=opts.circuit_breaker_per_channel)
        self._fetcher = Fetcher(
            engine=engine,
            driver=driver,
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
            claimer=self._claimer,
            on_short_claim=self._free_held_slots,
            covered=lambda: self._outer_config.wakeups.covered,
        )
        if self.batch:
            self._fetcher.per_worker = opts.fetch_batch_size
        self._flusher = OutcomeFlusher(
            engine=engine,
            driver=driver,
            interval=opts.flush_interval,
            batch_size=flush_batch_size(self._fetcher.batch_size, opts),
            on_written=self._release_held,
            after_write=self._after_write,
            log=self._log,
            health=self._outer_config.health,
            claimed_since=self._claimed_since,
        )
        self._breakers = None
        if opts.circuit_breaker_threshold is not None:
            self._breakers = self._fetcher.breakers = Breakers(
                engine=engine,
                driver=driver,
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
            driver=driver,
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
            driver=driver,
            held=self._held,
            interval=opts.release_stuck_timeout / 3,
            log=self._log,
            health=self._outer_config.health,
        )
        watcher = ControlWatcher(
            engine=engine,
            driver=driver,
            queues=self.queues,
            fetcher=self._fetcher,
            wake=self._wake,
            log=self._log,
            health=self._outer_config.health,
            breakers=self._breakers,
        )
        self._written = WrittenClaims(opts.release_stuck_timeout)
        self._recovery = ClaimRecovery(
            engine=engine,
            driver=driver,
            written=self._written,
            held=self._held,
            on_released=self._wake.set,
            buffer=self._buffer,
            let_go=self._let_go_unhandled,
            log=self._log,
            health=self._outer_config.health,
        )
        self._loops = [self._flusher, releaser, leases, watcher, self._recovery]
        self._outer_config.wakeups.register(
            self.queues, self._wake, max_fetch_interval=opts.max_fetch_interval
        )
        self._tasks = [
            self._spawn(self._fetcher.run(), "fetch"),
            self._spawn(self._flusher.run(), "flush"),
            self._spawn(releaser.run(), "release-stuck"),
            self._spawn(leases.run(), "leases"),
            self._spawn(watcher.run(), "controls"),
            self._spawn(self._recovery.run(), "recovery"),
        ]
        self._delivery = Delivery(
            options=opts,
            batch=self.batch,
            buffer=self._buffer,
            fetcher=self._fetcher,
            flusher=self._flusher,
            breakers=self._breakers,
            held=self._held,
            health=self._outer_config.health,
            stopping=self._stopping,
            process_message=self.process_message,
            stop_consuming=self._stop_consuming,
            log=self._log,
        )
        self._load = ConsumerLoad(
            queues=self.queues,
            held=self._held,
            running=self._busy_workers,
            lease_interval=leases.interval,
        )
        self._outer_config.workers.attach(self._load)
        work = self._delivery.work
        self._workers = [self._spawn(work(), f"worker-{i}") for i in range(opts.max_workers)]
        # Report a blocked event loop well before a lease could lapse over it.
        threshold = min(DEFAULT_STALL_THRESHOLD, opts.release_stuck_timeout / 3)
        for task in self._workers:
            self._outer_config.stall_watch.watch(task, self._describe_delivery(task), threshold)

    def _busy_workers(self) -> int:
        """Workers with a message in hand (running its handler), for the workers
        table: those not waiting for the buffer. Read from the buffer's count, so that
        deliveries keep no tally of their own."""
        return max(0, sum(not task.done() for task in self._workers) - self._buffer.idle_workers)

    def _describe_delivery(self, task: asyncio.Task[Any]) -> Callable[[], str | None]:
        """What `task` (a worker) is delivering, for the stall watch's report."""
        handlers = ", ".join(repr(call.name) for call in self.calls) or "none"

        def describe() -> str | None:
            raw = self._delivery.delivering.get(task) if self._delivery is not None else None
            if raw is None:
                return None
            return f"handler {handlers} (queue {raw.queue!r}, message {raw.id})"

        return describe

    def _stop_consuming(self, *, exit_app: bool) -> None:
        """A handler raised StopConsume, or SystemExit (which ends the app too)."""
        asyncio.get_running_loop().create_task(self.stop())
        if exit_app and (app := self._outer_config.context.get("app")):
            app.exit()

    def _hold(self, claimed: list[ClaimedMessage]) -> list[ClaimedMessage]:
        """Hold what a claim returned; returns what to hand to the workers."""
        held, again = self._held, None
        hold = held.setdefault
        for raw in claimed:
            if hold(raw.id, raw) is not raw:
                again = [] if again is None else again
                again.append(raw)
            if raw.ordering_key is not None:
                self._keyed = True
        return claimed if again is None else self._claimed_again(claimed, again)

    def _claimed_again(
        self, claimed: list[ClaimedMessage], again: list[ClaimedMessage]
    ) -> list[ClaimedMessage]:
        """The claim returned rows this subscriber still holds under an earlier claim.

        - The earlier copy waits in the buffer: the database no longer showed its claim
          (lost in a failover to a standby it had not reached, or its lease lapsed). It
          is dropped unhandled; the new copy runs.
        - The earlier copy was handed to a worker, under the same token: a failover
          lost its claim and the row counted to the same token again. Its outcome
          settles the new claim, so the new copy is not run twice.
        - Under another token: the earlier copy's outcome is fenced out, or was written
          and not yet let go of (a retry due at once claimed meanwhile). The new copy
          runs, and stays held when the earlier outcome is let go of (`_superseded`).
        """
        held = self._held
        earlier = {id(held[raw.id]) for raw in again}
        dropped = self._buffer.take_where(lambda raw: id(raw) in earlier)
        unstarted = {raw.id for raw in dropped}
        skipped: set[int] = set()
        for raw in again:
            handed = held[raw.id]
            if raw.id not in unstarted and handed.token == raw.token:
                skipped.add(id(raw))
                continue
            if raw.id not in unstarted:
                self._superseded.add((handed.id, handed.token))
            held[raw.id] = raw
        self._let_go_unhandled(dropped)
        if dropped or skipped:
            self._log(
                logging.WARNING,
                f"a claim returned {len(dropped) + len(skipped)} messages this process "
                "already held, so the database no longer showed the earlier claims (a "
                "failover to a standby they had not reached, or lapsed leases): "
                f"{len(dropped)} waiting copies were dropped unhandled, and "
                f"{len(skipped)} handed to workers under the same claim are not run again",
            )
        return [raw for raw in claimed if id(raw) not in skipped] if skipped else claimed

    def _of_held_claims(self, outcomes: Sequence[Outcome], *, forget: bool) -> list[Outcome]:
        """`outcomes` less those of copies whose rows this process claimed again under
        another token (`_claimed_again`): what follows an outcome concerns the new
        claim, still held. `forget`: these outcomes are done with."""
        superseded, kept = self._superseded, []
        for outcome in outcomes:
            claim = (outcome.id, outcome.token)
            if claim not in superseded:
                kept.append(outcome)
            elif forget:
                superseded.discard(claim)
        return kept

    async def _after_write(self, outcomes: Sequence[Outcome]) -> None:
        # Breakers count every outcome they were handed, a superseded copy's too (its
        # row, queue and channel are the new copy's): handed and counted stay paired.
        keyed = self._of_held_claims(outcomes, forget=False) if self._superseded else outcomes
        try:
            await self._release_keys(keyed)
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

    def _let_go_unhandled(self, dropped: Sequence[ClaimedMessage]) -> None:
        """Messages taken out of the buffer with no outcome to write (their claims were
        lost, recovery.py): they are no longer held, nor this process's breaker probe,
        and their room may be claimed."""
        held = self._held
        for raw in dropped:
            current = held.get(raw.id)
            if current is raw:
                del held[raw.id]
            elif current is not None:
                # a newer claim of its row is held (`_claimed_again`): that one is
                # the probe, if either is, and keeps the row held
                self._superseded.discard((raw.id, raw.token))
                continue
            if self._breakers is not None:
                self._breakers.dropped(raw)
        if dropped:
            self._wake.set()
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
                config.driver, lambda: ordering.release_next(config.driver, config.engine, keys)
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

    def _claimed_since(self, outcomes: Sequence[Outcome]) -> float | None:
        """When the earliest claim among `outcomes` was made (time.monotonic())."""
        held = self._held
        times = [raw.claimed_at_monotonic for o in outcomes if (raw := held.get(o.id)) is not None]
        return min(times, default=None)

    def _release_held(self, outcomes: Sequence[Outcome]) -> None:
        self._written.note(outcomes)
        if self._superseded:
            outcomes = self._of_held_claims(outcomes, forget=True)
        held, freed_key = self._held, False
        if self._keyed:
            for outcome in outcomes:
                raw = held.pop(outcome.id, None)
                if raw is not None and raw.ordering_key is not None and outcome.archives:
                    freed_key = True
        else:  # no ordering key claimed yet: nothing to look at but the ids
            forget = held.pop
            for outcome in outcomes:
                forget(outcome.id, None)
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
        if self._delivery is not None:
            self._delivery.consuming = False
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
        if self._load is not None:
            self._outer_config.workers.detach(self._load)
            self._load = None
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

    @override
    async def get_one(self, *, timeout: float = 5.0) -> SqlaMessage | None:
        """Claim one message without a handler; settle it with ack/nack/reject.

        Nobody keeps its lease: an unsettled message goes back to the queue when a
        running subscriber of that queue next releases stuck messages.
        """
        assert not self.calls, "get_one() is for subscribers without a handler"
        raw = await self._pull.next_message(timeout)
        if raw is None:
            return None
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
