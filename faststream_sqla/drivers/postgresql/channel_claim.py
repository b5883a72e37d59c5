"""PostgreSQL's channel claim: the read (the shared recursive walks, `..channel_claim`)
and the write as one statement, both in autocommit on the pool's asyncpg connection.

The write counts the queue row's version up and marks the channels' messages as CTEs
of one statement, whose first column says whether the version check passed. The
channels' shares come as two arrays, each channel's messages reached through a LATERAL
subquery per array element: one statement text for any number of channels, so it is
prepared and planned once (a UNION ALL branch per channel was planned anew for every
claim). Rate windows and breaker probes, when a claim has any, are written in the
same transaction as the write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert

from faststream_sqla.channels.plan import ProbeMissed

from .._claim import claimed_columns, first_of_its_key, ready_predicate
from ..channel_claim import ChannelClaim, TakeShape, bind
from ._asyncpg import driver_connection

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.channels.plan import Candidate, Member, Plan, QueueRow
    from faststream_sqla.message import ClaimedMessage

    from .driver import PostgresDriver


class PostgresChannelClaim(ChannelClaim):
    driver: PostgresDriver

    @asynccontextmanager
    async def session(self, engine: AsyncEngine) -> AsyncIterator[PostgresChannelSession]:
        # Two round trips on the driver's connection, in autocommit: the read, then the
        # write as one statement; with rate windows to write, those two statements in
        # one transaction. A claim that goes on to the channels from the start when
        # its read left them out reads them alone in between: the write's version
        # check still covers both reads, as it covers a read made ahead of its write.
        async with driver_connection(engine) as conn:
            yield PostgresChannelSession(self, engine, conn)

    def statements(self, shape: TakeShape) -> Any:
        # one statement text for any number of channels: only PLAIN's share changes it
        return super().statements((-1, shape[1], False))

    def _build_write(self, shape: TakeShape) -> Any:
        return self._single_write(self._take(plain=shape[1]))

    def _take(self, *, plain: bool) -> sa.Select:
        tables, m = self.tables, self.tables.message
        shares = (
            sa.func.unnest(
                # asyncpg takes Python lists as arrays: no conversion on our side
                sa.cast(bind("members", sa.types.NullType()), ARRAY(sa.Text())),
                sa.cast(bind("takes", sa.types.NullType()), ARRAY(sa.Integer())),
            )
            .table_valued("channel", "n")
            .render_derived(name="shares")
        )
        oldest = (
            sa.select(m.c.id)
            .where(
                m.c.queue == bind("ch_queue"),
                m.c.channel == shares.c.channel,
                ready_predicate(m),
                m.c.channel.isnot(None),
                m.c.next_attempt_at <= bind("now", m.c.next_attempt_at.type),
                first_of_its_key(tables),
            )
            .order_by(m.c.next_attempt_at, m.c.id)
            .limit(shares.c.n)
            .lateral("oldest")
        )
        take = sa.select(oldest.c.id).select_from(shares.join(oldest, sa.true()))
        if not plain:
            return take
        return sa.union_all(  # type: ignore[return-value]
            take.subquery("channels").select(), self._branch(None).subquery("plain").select()
        )

    def _single_write(self, take: sa.Select) -> sa.Select:
        m = self.tables.message
        bump = self.bump.returning(self.tables.controls.c.version).cte("bump")
        marked = (
            self._mark(take)
            .where(sa.exists(sa.select(bump.c.version)))
            .returning(*claimed_columns(m, headers_as_text=True))
            .cte("marked")
        )
        one = sa.select(sa.literal_column("1").label("one")).subquery("one")
        applied = sa.select(sa.func.count()).select_from(bump).scalar_subquery()
        return sa.select(applied.label("applied"), *marked.c).select_from(
            one.outerjoin(marked, sa.true())
        )

    def _share_parameters(self, parameters: dict[str, Any], channels: list[Member]) -> None:
        parameters["members"] = [m.name for m in channels]
        parameters["takes"] = [m.share for m in channels]

    def upsert_window(self) -> Any:
        return self._window_on_conflict(pg_insert)

    def insert_if_missing(self) -> Any:
        return pg_insert(self.tables.controls).on_conflict_do_nothing()

    async def write(
        self, engine: AsyncEngine, conn: Any, queue: str, head: QueueRow, planned: Plan
    ) -> list[Sequence[Any]] | None:
        """The write on the session's connection; None if the version moved."""
        on_driver = self.driver._on_driver
        parameters = self.write_parameters(queue, head, planned)
        shape = self.take_shape(planned)
        write = on_driver.get(
            ("channel_write", shape[1]),
            engine.dialect,
            lambda: self.statements(shape),
            tuple(parameters),
        )
        arguments = write.arguments(parameters)
        if not planned.windows and not planned.probes:
            written = await conn.fetch(write.sql, *arguments)
        else:
            upsert = on_driver.get(
                "channel_window",
                engine.dialect,
                self.upsert_window,
                ("ch_queue", "now", "w_channel", "w_slot", "w_counts"),
            )
            async with conn.transaction():
                written = await conn.fetch(write.sql, *arguments)
                if written[0][0]:
                    windows = self.window_parameters(queue, head.now, planned)
                    if windows:
                        await conn.executemany(upsert.sql, [upsert.arguments(w) for w in windows])
                    await self._mark_probes(conn, engine, queue, head, planned)
        if not written[0][0]:
            return None  # another claim wrote first: read again
        return [tuple(row)[1:] for row in written if row[1] is not None]

    async def _mark_probes(
        self, conn: Any, engine: AsyncEngine, queue: str, head: QueueRow, planned: Plan
    ) -> None:
        """The HALF_OPEN marks of the channels this claim probes (rare: a breaker
        reopening), each with its history row; ProbeMissed if one no longer applies."""
        mark, event = self.half_open_on_driver(self.driver._on_driver, engine.dialect)
        for probe in self.probe_parameters(queue, head.now, planned):
            if await conn.execute(mark.sql, *mark.arguments(probe)) != "UPDATE 1":
                raise ProbeMissed(probe["p_channel"])
            await conn.execute(event.sql, *event.arguments(probe))


class PostgresChannelSession:
    """The channel claim's read and write on one asyncpg connection."""

    def __init__(self, claim: PostgresChannelClaim, engine: AsyncEngine, conn: Any) -> None:
        self.claim, self.engine, self.conn = claim, engine, conn

    async def read(self, queue: str, limit: int) -> tuple[QueueRow | None, list[Candidate]]:
        on_driver, engine, conn = self.claim.driver._on_driver, self.engine, self.conn

        async def run(name: Hashable, statement: Any, parameters: dict[str, Any]) -> Any:
            read = on_driver.of(name, engine.dialect, statement, tuple(parameters))
            return await conn.fetch(read.sql, *read.arguments(parameters))

        return await self.claim.read_with(queue, limit, run)

    async def write(self, queue: str, head: QueueRow, planned: Plan) -> list[ClaimedMessage] | None:
        rows = await self.claim.write(self.engine, self.conn, queue, head, planned)
        return None if rows is None else self.claim.driver.read_claimed(rows)
