"""Running a function on aiosqlite's own thread, in one hand-off.

The one place the package touches aiosqlite's internals: `Connection._execute(fn, *args)`
is how aiosqlite runs each of its own methods on the connection's thread, and `_conn` is
the `sqlite3.Connection` living there. Neither is public API, so the range of aiosqlite
these were tested with is pinned in pyproject.toml, and tests/drivers/test_dependency_adapters.py
fails, naming the installed version, if an upgrade changes them. Anything that is not
aiosqlite's connection (another driver, a wrapper) is reported as such and the caller
takes SQLAlchemy's public route instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def runs_calls_in_thread(native: Any) -> bool:
    """Whether `native` is aiosqlite's connection, whose calls this module can make."""
    return callable(getattr(native, "_execute", None)) and isinstance(
        getattr(type(native), "_conn", None), property
    )


async def run_in_thread(native: Any, work: Callable[[Any], T]) -> T:
    """`work(sqlite3 connection)` on the thread of aiosqlite's connection `native`."""
    return await native._execute(work, native._conn)
