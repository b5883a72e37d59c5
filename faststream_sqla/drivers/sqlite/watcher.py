"""SQLite's wake-up source: `PRAGMA data_version` on a read-only connection of its own.

A connection's data_version changes when another connection commits to the file:
another process's, or one of this broker's own pool. In WAL mode reading it reads a
counter in the shared memory beside the file, so the watcher reads it every few
milliseconds, and looks for new messages (`new_messages`) only when it moved.

Both run on the event loop itself, on a plain sqlite3 connection. Through aiosqlite's
thread, or any thread, each look cost 200-300 µs of CPU for the hand-off and back, where
the call itself costs about 8 (docs/configuration.md has the figures): a watcher
looking every few milliseconds would have cost a tenth of a core. The loop cannot be
held up: the connection never writes (`query_only`), so it never asks for the write
lock, and never waits (`busy_timeout` 0), so a look that meets a lock is skipped. Only
opening the file runs on a thread.

A checkpoint by another process (the WAL copied into the file and started again)
changes data_version too; the next look finds nothing new, and the ones after see the
commits that follow.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ..base import WakeupHooks
from ..watch import ROWS_PER_LOOK, MessageWatcher, Pace, Row, Seen

#: looks every 2 ms while messages arrive (a look that finds data_version unchanged
#: costs ~8 µs), for a second after the last, then backs off to 50 ms while idle: ~0.02%
#: of a core per idle process, and at most 50 ms to the first message after a lull
SQLITE_PACE = Pace(shortest=0.002, longest=0.05, hold=1.0)


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _close_opened(opening: asyncio.Future[tuple[sqlite3.Connection, int, int]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result()[0].close()


class SQLiteWatcher(MessageWatcher):
    """One connection of its own, read-only, opened with the engine's own arguments."""

    pace = SQLITE_PACE
    title = "SQLite wake-up watcher"

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        statements: dict[str, str],
        hooks: WakeupHooks,
        due_statement: Callable[[tuple[str, ...]], tuple[str, Sequence[Any]]],
    ) -> None:
        super().__init__(hooks)
        self._connect, self._sql = connect, statements
        self._due_statement = due_statement
        self._conn: sqlite3.Connection | None = None
        self._cursor: Any = None
        self._version: int | None = None

    async def _open(self) -> int:
        def open_file() -> tuple[sqlite3.Connection, int, int]:
            conn = self._connect()
            try:
                for name in ("watch_reads_only", "watch_never_waits"):
                    conn.execute(self._sql[name])
                # the version first: a commit after it shows in the next look
                (version,) = conn.execute(self._sql["data_version"]).fetchone()
                (newest,) = conn.execute(self._sql["newest_message"]).fetchone()
            except BaseException:
                conn.close()
                raise
            return conn, version, newest

        opening = asyncio.ensure_future(asyncio.to_thread(open_file))
        try:
            conn, self._version, newest = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # stopped while the thread opens the file: close what it opens
            opening.add_done_callback(_close_opened)
            raise
        self._conn, self._cursor = conn, conn.cursor()
        return int(newest)

    async def _look(self, seen: Seen) -> Sequence[Row] | None:
        cursor = self._cursor
        try:
            (version,) = cursor.execute(self._sql["data_version"]).fetchone()
            if version == self._version:
                return None
            rows: list[Row] = cursor.execute(
                self._sql["new_messages"], (seen.newest, ROWS_PER_LOOK)
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if _busy(exc):  # a checkpoint or a recovery holds the file: look again next time
                return None
            raise
        self._version = version
        return rows

    async def _due(self, queues: tuple[str, ...]) -> list[str] | None:
        sql, arguments = self._due_statement(queues)
        try:
            rows = self._cursor.execute(sql, arguments).fetchall()
        except sqlite3.OperationalError as exc:
            if _busy(exc):
                return None
            raise
        return [queue for (queue,) in rows]

    def _close(self) -> None:
        conn, self._conn, self._cursor = self._conn, None, None
        if conn is not None:
            conn.close()
