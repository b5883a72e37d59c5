"""`subscriber(...)` and `publisher(...)` decorators, shared by broker and router."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from faststream._internal.broker.registrator import Registrator
from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy
from typing_extensions import override

from faststream_sqla.broker_config import SqlaBrokerConfig
from faststream_sqla.durations import Seconds, in_seconds
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.publisher.factory import create_publisher
from faststream_sqla.schedules import Schedule
from faststream_sqla.schema import validate_queue_name
from faststream_sqla.subscriber.config import ConsumeOptions, default_retry_strategy
from faststream_sqla.subscriber.factory import create_subscriber

if TYPE_CHECKING:
    from fast_depends.dependencies import Dependant
    from faststream._internal.types import BrokerMiddleware, CustomCallable

    from faststream_sqla.publisher.usecase import SqlaPublisher
    from faststream_sqla.retry import RetryStrategy
    from faststream_sqla.subscriber.usecase import SqlaSubscriber


class SqlaRegistrator(Registrator[ClaimedMessage, SqlaBrokerConfig]):
    # The defaults are written out (not read from ConsumeOptions) so that signatures and
    # the API reference show them; tests/features/docs/test_docs_site.py keeps the two equal.
    # Registrator's subscriber/publisher register an endpoint built elsewhere; ours
    # build it from a queue name and options.
    @override
    def subscriber(  # type: ignore[override]
        self,
        queues: str | Sequence[str],
        *,
        topics: str | Sequence[str] = (),
        batch: bool = False,
        max_workers: int = 1,
        retry_strategy: RetryStrategy | None = None,
        ack_policy: AckPolicy = EMPTY,
        max_deliveries: int | None = None,
        fetch_batch_size: int = 100,
        max_fetch_batch_size: int | None = None,
        overfetch_factor: float = 2.0,
        min_fetch_interval: Seconds = 0.0,
        max_fetch_interval: Seconds = 1.0,
        flush_interval: Seconds = 0.05,
        release_stuck_interval: Seconds = 10.0,
        release_stuck_timeout: Seconds = 30.0,
        permanent_exceptions: Sequence[type[BaseException]] = (),
        handler_timeout: Seconds | None = None,
        circuit_breaker_threshold: int | None = None,
        circuit_breaker_cooldown: Seconds = 30.0,
        circuit_breaker_per_channel: bool = False,
        # FastStream arguments
        no_reply: bool = False,
        dependencies: Sequence[Dependant] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        persistent: bool = True,
        # AsyncAPI
        title: str | None = None,
        description: str | None = None,
        include_in_schema: bool = True,
        schedule: Schedule | None = None,
    ) -> SqlaSubscriber:
        """Consume one queue or several.

        Args:
            queues: a queue name or a list of them.
            topics: topic patterns (`"orders.*"`, `"orders.#"`) each queue is bound to
                when the broker starts, so that publishes to matching topics reach it
                (docs/topics.md); binding again is harmless, and stopping never unbinds.
            batch: the handler receives a list: every message waiting in the prefetch
                buffer, up to fetch_batch_size; `msg.messages` settles them one by one.
            max_workers: handlers running at once in this process.
            retry_strategy: when a nacked or failed message is tried again (default:
                exponential backoff with jitter, about 1, 2, 4, 8 s: 5 attempts in all).
            ack_policy: what an unhandled exception means (default NACK_ON_ERROR).
            max_deliveries: a message delivered more often than this is FAILED without
                running the handler (poison messages that crash the process).
            fetch_batch_size: messages claimed per round trip while handlers are slow,
                the smallest claim; also the most a batch handler receives at once.
            max_fetch_batch_size: the largest claim, reached while handlers empty the
                buffer in under a quarter of a second (default 1000, or
                fetch_batch_size if larger); set it to fetch_batch_size for a fixed size.
            overfetch_factor: the prefetch buffer holds a claim's size * this.
            min_fetch_interval: pause after a full batch, seconds.
            max_fetch_interval: longest pause when idle (publishes wake it sooner).
            flush_interval: how often finished outcomes are written, seconds.
            release_stuck_interval: how often stuck messages are looked for, seconds.
            release_stuck_timeout: a claim not renewed for this long (its process died or
                lost the database) is released; live workers renew theirs every third of it.
            permanent_exceptions: exception types after which a message is FAILED at
                once, without further retries (like `RejectMessage`); a body that fails
                the handler's pydantic model always is.
            handler_timeout: how long a handler (one message, or a batch) may run (seconds
                or a timedelta, as every duration here); past that it is cancelled and
                the attempt fails with HandlerTimeoutError, retried by the retry strategy
                (default: no limit).
            circuit_breaker_threshold: consecutive failed attempts (across every process)
                after which no process claims from the queue for circuit_breaker_cooldown,
                then one probe message decides (default: no breaker).
            circuit_breaker_cooldown: seconds an open breaker waits before its probe.
            circuit_breaker_per_channel: each channel of the queue gets a breaker of its
                own (the same threshold and cooldown): a failing channel stops alone,
                the others go on; the queue's breaker counts messages without one.
            no_reply: do not publish the handler's return value to the message's
                `reply_to` queue.
            dependencies: FastDepends dependencies of this handler.
            parser: a custom parser for this subscriber (default: the broker's).
            decoder: a custom decoder for this subscriber (default: the broker's).
            middlewares: FastStream middlewares for this subscriber only, run inside the
                broker's and router's.
            persistent: FastStream's registration flag; False marks a temporary
                subscriber that test clients remove again.
            title: the AsyncAPI channel title.
            description: the AsyncAPI channel description.
            include_in_schema: show this subscriber in the AsyncAPI document.
            schedule: a `Schedule` that publishes to this subscriber's queue (which must
                be one), as `broker.schedule(queue, ...)` would.

        Every option is checked when the subscriber is built (`InvalidOptionError`
        names the option and its bounds); docs/configuration.md lists them all.
        """
        if schedule is not None:
            if not isinstance(schedule, Schedule):
                msg = f"schedule must be a Schedule(...), got {type(schedule).__name__}"
                raise InvalidOptionError(msg)
            names = [queues] if isinstance(queues, str) else list(queues)
            if len(names) != 1:
                msg = f"schedule= needs a subscriber of one queue, this one has {len(names)}"
                raise InvalidOptionError(msg)
            self._declare_schedule(schedule.bound(names[0]))
        options = ConsumeOptions(
            max_workers=max_workers,
            retry_strategy=retry_strategy or default_retry_strategy(),
            max_deliveries=max_deliveries,
            fetch_batch_size=fetch_batch_size,
            max_fetch_batch_size=max_fetch_batch_size,
            overfetch_factor=overfetch_factor,
            min_fetch_interval=in_seconds(min_fetch_interval),
            max_fetch_interval=in_seconds(max_fetch_interval),
            flush_interval=in_seconds(flush_interval),
            release_stuck_interval=in_seconds(release_stuck_interval),
            release_stuck_timeout=in_seconds(release_stuck_timeout),
            permanent_exceptions=(
                tuple(permanent_exceptions)
                # anything else goes on as given, for ConsumeOptions to refuse by name
                if isinstance(permanent_exceptions, (list, tuple))
                else permanent_exceptions  # type: ignore[arg-type]
            ),
            handler_timeout=None if handler_timeout is None else in_seconds(handler_timeout),
            circuit_breaker_threshold=circuit_breaker_threshold,
            circuit_breaker_cooldown=in_seconds(circuit_breaker_cooldown),
            circuit_breaker_per_channel=circuit_breaker_per_channel,
        )
        subscriber = create_subscriber(
            queues=queues,
            options=options,
            ack_policy=ack_policy,
            no_reply=no_reply,
            batch=batch,
            middlewares=middlewares,
            config=cast("SqlaBrokerConfig", self.config),
            title_=title,
            description_=description,
            include_in_schema=include_in_schema,
            topics=topics,
        )
        super().subscriber(subscriber, persistent=persistent)
        return subscriber.add_call(
            parser_=parser or self._parser,
            decoder_=decoder or self._decoder,
            dependencies_=dependencies,
        )

    def schedule(
        self,
        queue: str,
        body: Any = None,
        *,
        every: timedelta | float | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        name: str | None = None,
        headers: dict[str, Any] | None = None,
        missed: str = "skip",
        catch_up_limit: int = Schedule.catch_up_limit,
        priority: int | None = None,
        ordering_key: str | None = None,
        delay: float | timedelta | None = None,
        ttl: float | timedelta | None = None,
    ) -> Schedule:
        """Publish `body` to `queue` on an interval (`every`: a timedelta or seconds, at
        least one second) or a cron expression (`cron`, read in `timezone`, default UTC),
        once per tick however many processes run this broker (docs/schedules.md).

        Args:
            queue: the queue each message goes to.
            body: the message, encoded as `publish` encodes it.
            every: an interval, from 1 second to 3650 days; or instead:
            cron: five fields, or six with seconds last.
            timezone: the IANA zone `cron` is read in (default UTC).
            name: the schedule's name in the database (default: the queue's name; two
                schedules of one queue need names).
            headers: headers of every message.
            missed: ticks that fell due while no process ran: "skip" fires the latest
                only, "catch_up" fires each, oldest first, up to `catch_up_limit`.
            catch_up_limit: 1 to 1000.
            priority: as in `publish`, for every message.
            ordering_key: as in `publish`, for every message.
            delay: as in `publish`, for every message.
            ttl: as in `publish`, for every message.
        """
        declared = Schedule(
            every=every,
            cron=cron,
            timezone=timezone,
            body=body,
            name=name,
            queue=queue,
            headers=headers,
            missed=missed,
            catch_up_limit=catch_up_limit,
            priority=priority,
            ordering_key=ordering_key,
            delay=delay,
            ttl=ttl,
        ).bound(queue)
        self._declare_schedule(declared)
        return declared

    @property
    def schedules(self) -> list[Schedule]:
        """The schedules declared here and on included routers."""
        return list(self.__dict__.get("_schedules", {}).values())

    def _declare_schedule(self, schedule: Schedule) -> None:
        declared: dict[str, Schedule] = self.__dict__.setdefault("_schedules", {})
        if schedule.key in declared:
            msg = (
                f"schedule {shown(schedule.key)} is declared twice: give each schedule of a "
                "queue its own name="
            )
            raise InvalidOptionError(msg)
        declared[schedule.key] = schedule

    @override
    def publisher(  # type: ignore[override]
        self,
        queue: str,
        *,
        headers: dict[str, Any] | None = None,
        persistent: bool = True,
        title: str | None = None,
        description: str | None = None,
        schema: Any | None = None,
        include_in_schema: bool = True,
    ) -> SqlaPublisher:
        """A publisher for `queue`: call `.publish()`, or decorate a handler to publish
        its return value.

        Args:
            queue: the target queue (a router's prefix is prepended).
            headers: headers added to every message of this publisher (a call's own
                headers win).
            persistent: FastStream's registration flag, as for subscribers.
            title: the AsyncAPI title (default `"<queue>:Publisher"`).
            description: the AsyncAPI description.
            schema: the payload schema for the AsyncAPI document (default: taken from
                the handler's return annotation).
            include_in_schema: show this publisher in the AsyncAPI document.
        """
        if headers is not None and not isinstance(headers, dict):
            msg = f"headers must be a dict, got {shown(headers)}"
            raise InvalidOptionError(msg)
        publisher = create_publisher(
            queue=queue,
            headers=headers,
            config=cast("SqlaBrokerConfig", self.config),
            title_=title,
            description_=description,
            schema_=schema,
            include_in_schema=include_in_schema,
        )
        super().publisher(publisher, persistent=persistent)
        return publisher

    # only SqlaRouters can be included (checked below)
    @override
    def include_router(  # type: ignore[override]
        self,
        router: SqlaRegistrator,
        *,
        prefix: str = "",
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        include_in_schema: bool | None = None,
    ) -> None:
        if not isinstance(router, SqlaRegistrator):
            msg = f"router must be a SqlaRouter, got {type(router).__name__}"
            raise TypeError(msg)
        super().include_router(
            router,
            prefix=prefix,
            dependencies=dependencies,
            middlewares=middlewares,
            include_in_schema=include_in_schema,
        )
        # Prefixes are known only now: a too-long prefixed name must fail here, not
        # leave a subscriber on a queue nobody can publish to.
        # a SqlaRegistrator makes only SqlaSubscribers and SqlaPublishers
        for sub in cast("list[SqlaSubscriber]", router.subscribers):
            for queue in sub.queues:
                validate_queue_name(queue)
        for pub in cast("list[SqlaPublisher]", router.publishers):
            validate_queue_name(pub.queue)
        # the router's queues are prefixed by its own prefix and the one given here
        full_prefix = router.config.prefix
        for declared in router.schedules:
            if full_prefix:
                declared = replace(
                    declared,
                    queue=full_prefix + (declared.queue or ""),
                    name=declared.name and full_prefix + declared.name,
                )
                declared = declared.bound(declared.queue or "")
            self._declare_schedule(declared)
