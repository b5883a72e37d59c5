"""Whether a broker's database answers, known once for all of the broker's loops and
workers.

When the database goes away every loop fails at once (claims, outcome writes, lease
renewals, release-stuck) and every handler that uses the database fails too. Without
one place that knows, each of those logs its own traceback per try and per message,
and every message run meanwhile spends an attempt on the outage. So the first failure
that says "unreachable" (`Driver.is_unreachable`) opens an outage: it is logged once,
workers stop starting handlers and hold what they claimed, loops retry without
logging, and a single probe (`SELECT 1`) watches for the database's return, which is
logged once too and resumes everything. Before it does, the checks registered with
`before_resuming` run (a subscriber drops prefetched messages whose claims the
database no longer shows): no held message starts until they are done, or until
RESUME_CHECK_TIMEOUT has passed.

A handler's own unreachable error may be about another service (its own database, an
HTTP API): the probe is asked first, so such a failure is an ordinary failed attempt
unless the broker's database is really gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from faststream_sqla.drivers.probe import select_one
from faststream_sqla.urls import masked

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver

Log = Callable[[int, str], None]

#: how long one probe may take before it counts as "no answer"
PROBE_TIMEOUT = 5.0
#: first and longest pause between probes during an outage
FIRST_PROBE_DELAY = 0.1
MAX_PROBE_DELAY = 2.0
#: how long the checks before resuming may take together; past it, work resumes anyway
RESUME_CHECK_TIMEOUT = 10.0


class DatabaseHealth:
    """One per broker: `reachable` is set while the database answers."""

    def __init__(self) -> None:
        self.reachable = asyncio.Event()
        self.reachable.set()
        #: `not reachable.is_set()`, kept as a plain attribute: workers read it per message
        self.is_down = False
        self.log: Log = lambda _level, _message: None
        self._engine: AsyncEngine | None = None
        self._driver: Driver | None = None
        self._down_since = 0.0
        self._watcher: asyncio.Task[None] | None = None
        self._probing: asyncio.Future[bool] | None = None
        #: outages seen so far, and probes that found the database gone (read by tests)
        self.outages = 0
        self.failed_probes = 0
        #: when the latest outage began (time.monotonic()), None before the first
        self.last_outage_began: float | None = None
        self._on_recovery: list[Callable[[], None]] = []
        self._before_resuming: list[Callable[[], Awaitable[object]]] = []

    def connect(self, engine: AsyncEngine, driver: Driver, log: Log) -> None:
        self._engine, self._driver, self.log = engine, driver, log

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        self._set_reachable()  # nothing may wait on a closed broker's database

    def _set_reachable(self) -> None:
        self.is_down = False
        self.reachable.set()

    def noticed(self, exc: BaseException) -> bool:
        """Whether `exc` means the database cannot be reached; if so the outage is
        known (and logged, the first time), and the caller should retry quietly."""
        if self._driver is None or not self._driver.is_unreachable(exc):
            return False
        self._open_outage(exc)
        return True

    async def confirms_outage(self, exc: BaseException) -> bool:
        """For an error a handler raised: whether it is the broker's database that cannot
        be reached (the outage is then open). Asks the database once unless an outage
        is already known; concurrent askers share one probe."""
        if self._driver is None or not self._driver.is_unreachable(exc):
            return False
        if self.is_down:
            return True
        if self._probing is None:
            self._probing = asyncio.ensure_future(self._probe())
            self._probing.add_done_callback(self._forget_probe)
        if await asyncio.shield(self._probing):
            return False
        self._open_outage(exc)
        return True

    async def until_reachable(self, stop: asyncio.Event) -> None:
        """Wait until the database answers again, or `stop` is set."""
        if not self.is_down or stop.is_set():
            return
        waits = {asyncio.ensure_future(self.reachable.wait()), asyncio.ensure_future(stop.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    def outage_since(self, moment: float) -> bool:
        """Whether the database was unreachable at some time after `moment`
        (time.monotonic()): what was written before it may be lost (a failover to a
        standby the writes had not reached) or released meanwhile."""
        began = self.last_outage_began
        return self.is_down or (began is not None and began >= moment)

    def on_recovery(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` each time an outage ends, once the database answers again;
        returns what unregisters it."""
        self._on_recovery.append(callback)
        return lambda: self._on_recovery.remove(callback)

    def before_resuming(self, check: Callable[[], Awaitable[object]]) -> Callable[[], None]:
        """Await `check` each time an outage ends, after the database answers and before
        workers and loops resume; returns what unregisters it. A check that fails or
        overruns RESUME_CHECK_TIMEOUT is logged and work resumes as it would without."""
        self._before_resuming.append(check)
        return lambda: self._before_resuming.remove(check)

    async def _run_resume_checks(self) -> None:
        checks = list(self._before_resuming)
        if not checks:
            return

        async def run(check: Callable[[], Awaitable[object]]) -> None:
            await check()

        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(run(check) for check in checks), return_exceptions=True),
                RESUME_CHECK_TIMEOUT,
            )
        except asyncio.TimeoutError:
            results = [TimeoutError(f"not done within {RESUME_CHECK_TIMEOUT:g}s")]
        for result in results:
            if isinstance(result, Exception):
                self.log(
                    logging.WARNING,
                    f"a check before resuming failed ({type(result).__name__}: {result}); "
                    "resuming without it",
                )

    def _forget_probe(self, _done: asyncio.Future[bool]) -> None:
        self._probing = None

    def _open_outage(self, exc: BaseException) -> None:
        if self.is_down:
            return
        self.is_down = True
        self.reachable.clear()
        self.outages += 1
        self._down_since = self.last_outage_began = time.monotonic()
        where = masked(self._engine.url) if self._engine is not None else "the database"
        self.log(
            logging.ERROR,
            f"lost the database at {where}: {type(exc).__name__}: {exc}. Handlers are "
            "paused and claimed messages held (no attempts are spent) until it is back; "
            "this is logged once per outage",
        )
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        delay = FIRST_PROBE_DELAY
        while not await self._probe():
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_PROBE_DELAY)
        seconds = time.monotonic() - self._down_since
        self.log(logging.WARNING, f"the database answers again after {seconds:.1f}s; resuming")
        await self._run_resume_checks()
        self._watcher = None
        self._set_reachable()
        for callback in list(self._on_recovery):
            callback()

    async def _probe(self) -> bool:
        """One `SELECT 1` on a connection of the broker's pool: does the database answer?"""
        assert self._engine is not None and self._driver is not None

        async def ask() -> None:
            assert self._engine is not None
            async with self._engine.connect() as conn:
                await select_one(conn)

        try:
            await asyncio.wait_for(ask(), PROBE_TIMEOUT)
        except Exception as exc:
            if self._driver.is_unreachable(exc) or isinstance(exc, asyncio.TimeoutError):
                self.failed_probes += 1
                return False
            raise
        return True
