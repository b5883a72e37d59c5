"""The broker vacuums its message table where the database needs that (PostgreSQL).

Each claim and each outcome leaves a dead row version behind. The claim index keeps an
entry for each one at the head of its queue, and every claim starts its walk there. A
walk steps over dead entries cheaply, but each claim walks all of them until a vacuum
removes them. Autovacuum visits a table at most once per `autovacuum_naptime` (a minute
by default). In that time a busy queue leaves hundreds of thousands of entries, and a
claim's server CPU grows several times over (docs/benchmarks.md#postgresql-vacuum).

So the broker runs a vacuum itself after a number of settled messages that grows with
the table: one vacuum reads every index in full, so it costs more on a bigger table,
while the dead head costs each claim in proportion to its length. The two costs balance
when the interval grows with the square root of the table's rows. MySQL purges dead
entries in the background and SQLite deletes in place, so this does nothing there.

A vacuum removes only rows deleted before the oldest snapshot still open anywhere in
the database (the horizon). While one session holds a snapshot for long (idle in a
transaction, a long report), every vacuum finds nothing to remove, and each still reads
every index and drives the planner's row estimate down, until claims switched from the
ordered index walk to a sort of every ready row. So before each vacuum the broker asks
for the horizon: if it has not moved since the last vacuum, nothing more could be
removed, and it skips the vacuum (saying once who holds the horizon back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver

#: fewest settled messages between two vacuums
MIN_SETTLED_BETWEEN_VACUUMS = 20_000
#: the interval is this many times the square root of the table's rows, when larger
SETTLED_PER_SQRT_ROW = 40
#: how long a stopping broker lets a vacuum in progress finish before cancelling it
STOP_GRACE_SECONDS = 2.0


def settled_between_vacuums(rows: float) -> int:
    """How many settled messages to let pass before the next vacuum of a table of
    `rows` rows (the interval at which its two costs above roughly balance)."""
    return max(MIN_SETTLED_BETWEEN_VACUUMS, int(SETTLED_PER_SQRT_ROW * math.sqrt(max(rows, 0))))


class MessageTableVacuum:
    """Counts the messages this broker's subscribers settle and vacuums the message
    table in the background once enough have passed, one vacuum at a time.

    Each process counts its own: with several processes on one table each vacuums on
    its own count, and a vacuum that finds another one running skips the table
    (`SKIP_LOCKED`) instead of waiting for it.
    """

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.vacuums = 0  #: vacuums completed since connect
        self.skipped = 0  #: vacuums skipped because the horizon had not moved
        #: why vacuums are off although enabled (the user may not vacuum the table)
        self.denied: str | None = None
        self.threshold = MIN_SETTLED_BETWEEN_VACUUMS
        self._settled = 0
        self._engine: AsyncEngine | None = None
        self._driver: Driver | None = None
        self._log: Callable[[int, str], None] = lambda _level, _message: None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._changed = asyncio.Condition()
        #: the horizon when the last vacuum ran, and whether a skip was logged since
        self._horizon: str | None = None
        self._told_holder = False

    @property
    def active(self) -> bool:
        return self._driver is not None

    def connect(self, engine: AsyncEngine, driver: Driver, log: Callable[[int, str], None]) -> None:
        self.denied = driver.vacuum_denied if self.enabled and driver.needs_vacuum else None
        if not (self.enabled and driver.needs_vacuum) or self.denied is not None:
            return
        self._engine, self._driver, self._log = engine, driver, log
        self._settled, self.vacuums, self._closing = 0, 0, False
        self.skipped, self._horizon, self._told_holder = 0, None, False

    def note_settled(self, count: int) -> None:
        """`count` more messages were settled (their outcomes written)."""
        if self._driver is None or self._engine is None:
            return
        self._settled += count
        if self._settled >= self.threshold and self._task is None and not self._closing:
            self._settled = 0
            self._task = asyncio.create_task(
                self._vacuum(self._engine, self._driver), name="faststream-sqla:vacuum"
            )

    async def _vacuum(self, engine: AsyncEngine, driver: Driver) -> None:
        try:
            await self.vacuum_now(engine, driver)
        except Exception as exc:
            self._log(logging.WARNING, f"vacuuming the message table failed: {exc!r}")
        finally:
            self._task = None

    async def vacuum_now(self, engine: AsyncEngine, driver: Driver) -> bool:
        """Vacuum the message table unless the horizon has not moved since the last
        vacuum (then nothing could be removed); whether it vacuumed."""
        oldest = await driver.oldest_snapshot(engine)
        horizon = None if oldest is None else oldest.horizon
        if oldest is not None and horizon == self._horizon:
            self.skipped += 1
            if not self._told_holder:
                self._told_holder = True
                self._log(
                    logging.WARNING,
                    f"not vacuuming the message table while {oldest.holder} holds a "
                    f"snapshot older than its dead rows (transaction id {horizon}): a "
                    "vacuum could remove none of them. Claims slow down as they pile up; "
                    "end that transaction to let them go",
                )
            return False
        rows = await driver.vacuum_message_table(engine)
        self._horizon, self._told_holder = horizon, False
        self.threshold = settled_between_vacuums(rows)
        async with self._changed:
            self.vacuums += 1
            self._changed.notify_all()
        return True

    async def wait_for_vacuums(self, count: int) -> None:
        """Wait until `count` vacuums have completed since connect."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.vacuums >= count)

    def close(self) -> None:
        """Start no more vacuums: the broker is stopping (its final flushes still count
        settled messages, and a vacuum begun then would only be cancelled)."""
        self._closing = True

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop counting. A vacuum in progress gets `grace` seconds to finish, then is
        cancelled: shutdown should not wait for a long one, and any later vacuum does
        its work."""
        self._closing = True
        task, self._engine, self._driver = self._task, None, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
