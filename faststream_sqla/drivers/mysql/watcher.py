"""MariaDB's (and MySQL's) wake-up source: a connection of its own, in autocommit,
that looks for new messages by primary key (`new_messages`) every few milliseconds
while they arrive and backs off while they do not.

The connection comes from the engine's pool, as PostgreSQL's LISTEN connection does,
and is closed, not pooled, when the watcher stops or loses it (autocommit must not
reach another user of the pool). Each look is bounded by `LOOK_TIMEOUT`: a server that
stops answering costs a reconnect, not a watcher that waits for good. The bound closes
the connection rather than cancel the look: `asyncio.wait_for` can swallow the
cancellation of a stop that lands as the look ends (before Python 3.12).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .._compiled import DriverStatement
from ..base import WakeupHooks
from ..watch import ROWS_PER_LOOK, MessageWatcher, Pace, Row, Seen

#: looks every 5 ms while messages arrive (a round trip and an index descent each), for
#: a second after the last, then backs off to 250 ms while idle: at most 250 ms to the
#: first message after a lull, four statements a second per idle process, beside its
#: look for due messages (the server's CPU for idle processes is a published target:
#: docs/configuration.md)
MYSQL_PACE = Pace(shortest=0.005, longest=0.25, hold=1.0)
#: seconds a look may take before the connection is given up for a new one
LOOK_TIMEOUT = 30.0


class MySQLWatcher(MessageWatcher):
    title = "MariaDB wake-up watcher"
    pace = MYSQL_PACE

    def __init__(
        self,
        engine: AsyncEngine,
        statements: dict[str, DriverStatement],
        hooks: WakeupHooks,
        *,
        late_commits: bool,
        due_statement: Callable[[tuple[str, ...]], DriverStatement],
    ) -> None:
        super().__init__(hooks)
        self.engine, self._statements = engine, statements
        self._due_statement = due_statement
        self.late_commits = late_commits
        #: the server's id of the watcher's connection (CONNECTION_ID()), once open
        self.connection_id: int | None = None
        self._raw: Any = None
        self._native: Any = None
        self._cursor: Any = None

    async def _open(self) -> int:
        self._raw = await self.engine.raw_connection()
        self._native = native = self._raw.driver_connection
        await native.autocommit(True)
        self.connection_id = native.thread_id()
        self._cursor = native.cursor()
        newest = self._statements["newest_message"]
        await self._cursor.execute(newest.sql, newest.arguments({}))
        (value,) = await self._cursor.fetchone()
        return int(value)

    async def _look(self, seen: Seen) -> Sequence[Row] | None:
        params: dict[str, Any] = {"after": seen.newest, "most": ROWS_PER_LOOK}
        if missing := seen.missing:
            statement = self._statements["late_and_new_messages"]
            params["missing"] = json.dumps(missing)
        else:
            statement = self._statements["new_messages"]
        cursor = self._cursor
        # a look that outlasts the bound fails as a lost connection does
        watchdog = asyncio.get_running_loop().call_later(LOOK_TIMEOUT, self._native.close)
        try:
            await cursor.execute(statement.sql, statement.arguments(params))
            rows: Sequence[Row] = await cursor.fetchall()
        finally:
            watchdog.cancel()
        return rows

    async def _due(self, queues: tuple[str, ...]) -> list[str] | None:
        statement = self._due_statement(queues)
        cursor = self._cursor
        watchdog = asyncio.get_running_loop().call_later(LOOK_TIMEOUT, self._native.close)
        try:
            await cursor.execute(statement.sql, statement.arguments({}))
            rows = await cursor.fetchall()
        finally:
            watchdog.cancel()
        return [queue for (queue,) in rows]

    def _close(self) -> None:
        raw, self._raw, self._native, self._cursor = self._raw, None, None, None
        if raw is not None:
            # closed without a word to the server, which may be gone: see the module
            raw.invalidate()
