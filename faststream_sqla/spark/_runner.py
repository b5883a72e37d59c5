"""Runs the package's async database code from Spark's synchronous world.

The driver may call us from a thread whose event loop is running (a notebook, an async
test): a coroutine then runs on a loop of its own in a short-lived thread. Executors
run one loop per task.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.urls import masked, parse_url

T = TypeVar("T")


def run_async(work: Callable[[], Awaitable[T]]) -> T:
    """`await work()` to completion, whether or not this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_call(work))
    outcome: dict[str, Any] = {}

    def in_thread() -> None:
        try:
            outcome["value"] = asyncio.run(_call(work))
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=in_thread, name="faststream-sqla-spark")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def _call(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


async def after_failed_connect(url: object) -> None:
    """After a failed connect aiosqlite stops its worker thread without waiting; a loop
    closed before that thread reports back makes it die with a traceback."""
    if str(url).startswith("sqlite"):
        await asyncio.sleep(0.1)


def executor_url(url: str) -> str:
    """`url` as Spark's executors must see it: a SQLite file by its absolute path (the
    executors' working directory is not the driver's); an in-memory SQLite database,
    which no other process can open, is refused."""
    parsed = parse_url(url)
    if not parsed.get_backend_name() == "sqlite":
        return url
    database = parsed.database or ""
    if database in ("", ":memory:") or "mode=memory" in str(parsed.query):
        msg = (
            f"{masked(parsed)} is an in-memory SQLite database, which Spark's executors "
            "cannot open; use a file"
        )
        raise InvalidOptionError(msg)
    if database.startswith("file:"):
        return url
    return parsed.set(database=os.path.abspath(database)).render_as_string(hide_password=False)
