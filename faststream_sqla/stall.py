"""Noticing, from a thread of its own, a handler that blocks the event loop.

A handler that blocks (`time.sleep`, heavy CPU work, a synchronous driver inside
`async def`) stops every coroutine of its process: lease renewals, claims, outcome
writes, the other handlers. Its process never takes back its own claims for that
(StuckReleaser leaves held messages alone), but other processes may once the block
outlasts `release_stuck_timeout`. The watch says so in the log, naming the handler,
its message and the line it blocked on, so the mistake is found rather than felt as
duplicates.

A pause spent mostly in Python's garbage collector is not a handler's doing, though the
collection runs inside whichever task allocated last (and its weakref callbacks show up
as that task's line). The watch times the loop thread's collections and words such a
pause as what it is, at INFO, rather than blaming the task.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

Log = Callable[[int, str], None]

#: how often the event loop marks that it is turning, and the watch looks
TICK = 0.05
#: a block shorter than this is not reported
DEFAULT_THRESHOLD = 1.0


class LoopStallWatch:
    """One per broker. Subscribers register their worker tasks with a description of
    what each is running; the watch thread runs while any task is registered."""

    def __init__(self, log: Log | None = None, threshold: float = DEFAULT_THRESHOLD) -> None:
        self.log: Log = log or (lambda _level, _message: None)
        self.threshold = threshold
        self._tasks: dict[asyncio.Task[object], Callable[[], str | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._beat = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        #: stalls reported so far (read by tests)
        self.reported = 0
        #: seconds the loop thread has spent in garbage collections since the watch began
        self._gc_seconds = 0.0
        self._gc_started: float | None = None
        self._gc_at_beat = 0.0

    def watch(
        self, task: asyncio.Task[object], describe: Callable[[], str | None], threshold: float
    ) -> None:
        """Name `task` in reports by `describe()`; report blocks longer than `threshold`
        (the smallest any watcher asked for)."""
        self._tasks[task] = describe
        self.threshold = min(self.threshold, threshold)
        if self._thread is None:
            self._start()

    def unwatch(self, task: asyncio.Task[object]) -> None:
        self._tasks.pop(task, None)
        if not self._tasks:
            self.stop()

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stop.clear()
        self._mark()
        gc.callbacks.append(self._time_collection)
        self._thread = threading.Thread(
            target=self._run, name="faststream-sqla-stall-watch", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._time_collection in gc.callbacks:
            gc.callbacks.remove(self._time_collection)

    def _time_collection(self, phase: str, _info: dict[str, int]) -> None:
        if threading.get_ident() != self._loop_thread:
            return
        if phase == "start":
            self._gc_started = time.monotonic()
        elif self._gc_started is not None:
            self._gc_seconds += time.monotonic() - self._gc_started
            self._gc_started = None

    def _collecting_for(self) -> float:
        """Seconds of collection so far, counting one still running."""
        started = self._gc_started
        running = time.monotonic() - started if started is not None else 0.0
        return self._gc_seconds + running

    def _mark(self) -> None:
        assert self._loop is not None
        self._beat = time.monotonic()
        self._gc_at_beat = self._gc_seconds
        self._timer = self._loop.call_later(TICK, self._mark)

    def _run(self) -> None:
        stalled_since: float | None = None
        culprit = ""
        collected_before = 0.0  # the loop thread's collections up to its last beat
        while not self._stop.wait(TICK):
            beat = self._beat
            if stalled_since is None:
                if time.monotonic() - beat > self.threshold + TICK:
                    stalled_since, culprit = beat, self._culprit()
                    collected_before = self._gc_at_beat
            elif beat > stalled_since:  # the loop turned again
                seconds = beat - stalled_since - TICK
                collecting = self._collecting_for() - collected_before
                if collecting >= seconds / 2:
                    self._report_collection(seconds, collecting)
                else:
                    self._report(seconds, culprit)
                stalled_since = None

    def _culprit(self) -> str:
        """What the event loop's thread is running now: the task, as its watcher
        describes it, and the innermost line of its stack."""
        assert self._loop is not None and self._loop_thread is not None
        task = asyncio.current_task(self._loop)
        describe = self._tasks.get(task) if task is not None else None
        what = describe() if describe is not None else None
        if what is None:
            what = f"task {task.get_name()!r}" if task is not None else "a callback"
        frame = sys._current_frames().get(self._loop_thread)
        if frame is not None:
            where = traceback.extract_stack(frame, limit=1)[-1]
            what += f" at {where.filename}:{where.lineno} ({where.line})"
        return what

    def _report(self, seconds: float, culprit: str) -> None:
        self.reported += 1
        self.log(
            logging.WARNING,
            f"the event loop was blocked for {seconds:.1f}s by {culprit}: no lease "
            "renewals, claims, outcome writes or other handlers ran meanwhile. Await "
            "instead of blocking, or run blocking work in a thread (asyncio.to_thread); "
            "a block longer than release_stuck_timeout lets other processes deliver "
            "the message again.",
        )

    def _report_collection(self, seconds: float, collecting: float) -> None:
        self.log(
            logging.INFO,
            f"the event loop paused for {seconds:.1f}s, {collecting:.1f}s of it in Python's "
            "garbage collector (many objects alive, or a starved CPU); no handler blocked it",
        )
