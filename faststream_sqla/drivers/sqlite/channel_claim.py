"""SQLite's channel claim: the read (the shared recursive walks, `..channel_claim`) and
the write in one transaction on SQLAlchemy's connection, under the broker's writer
lock: one writer at a time, so the version never moves between them.

The write counts the queue row's version up, writes rate windows and breaker probes,
then marks the take (a UNION ALL of one branch per channel with a share, and PLAIN's)
with an UPDATE ... RETURNING.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from faststream_sqla.channels.plan import ProbeMissed

from .._claim import claimed_columns
from ..channel_claim import ChannelClaim, TakeShape

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.channels.plan import Candidate, Plan, QueueRow
    from faststream_sqla.message import ClaimedMessage


class SQLiteChannelClaim(ChannelClaim):
    @asynccontextmanager
    async def session(self, engine: AsyncEngine) -> AsyncIterator[SQLiteChannelSession]:
        async with self.driver.own_transaction(engine) as conn:
            yield SQLiteChannelSession(self, conn)

    def _build_write(self, shape: TakeShape) -> Any:
        """The take: a SELECT of ids, which `write` marks."""
        channels, plain, _joined = shape
        wanted: list[int | None] = [*range(channels), *([None] if plain else [])]
        # SQLite takes a compound's LIMIT only outside it: a subquery per branch
        branches = [
            self._branch(i).subquery(f"b{'p' if i is None else i}").select() for i in wanted
        ]
        if len(branches) == 1:
            return branches[0]
        return sa.union_all(*branches)

    def upsert_window(self) -> Any:
        return self._window_on_conflict(sqlite_insert)

    def insert_if_missing(self) -> Any:
        return sa.insert(self.tables.controls).prefix_with("OR IGNORE")

    async def write(
        self, conn: AsyncConnection, queue: str, head: QueueRow, planned: Plan
    ) -> list[Sequence[Any]] | None:
        """The write in the session's transaction; None if the version moved."""
        parameters = self.write_parameters(queue, head, planned)
        bumped = await conn.execute(self.bump, parameters)
        if bumped.rowcount == 0:
            return None
        for window_row in self.window_parameters(queue, head.now, planned):
            await conn.execute(self.upsert_window(), window_row)
        for probe_row in self.probe_parameters(queue, head.now, planned):
            mark, event = self.half_open
            if (await conn.execute(mark, probe_row)).rowcount != 1:
                raise ProbeMissed(probe_row["p_channel"])
            await conn.execute(event, probe_row)
        if planned.shape == (0, False):
            return []  # the rotation moved past channels with no room
        take = self.statements(self.take_shape(planned))
        marked = self._mark(take).returning(*claimed_columns(self.tables.message))
        return [tuple(row) for row in await conn.execute(marked, parameters)]


class SQLiteChannelSession:
    """A channel claim's session on SQLAlchemy's connection, in one transaction."""

    def __init__(self, claim: SQLiteChannelClaim, conn: AsyncConnection) -> None:
        self.claim, self.conn = claim, conn

    async def read(self, queue: str, limit: int) -> tuple[QueueRow | None, list[Candidate]]:
        conn = self.conn

        async def run(_name: Hashable, statement: Any, parameters: dict[str, Any]) -> Any:
            return (await conn.execute(statement, parameters)).mappings().all()

        return await self.claim.read_with(queue, limit, run)

    async def write(self, queue: str, head: QueueRow, planned: Plan) -> list[ClaimedMessage] | None:
        rows = await self.claim.write(self.conn, queue, head, planned)
        return None if rows is None else self.claim.driver.read_claimed(rows)
