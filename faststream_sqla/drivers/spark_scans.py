"""The reads behind `spark.read_archive` and `spark.read_queue`: the lowest and highest
id of a table's rows that match the filters, and a page of those rows within an id
range, in id order. The same statements run on every database; the table's shape is
the one of the database the engine (or URL) names."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.schema import MessageState, QueueTables, TableNames
from faststream_sqla.urls import parse_url

from .base import reading


@dataclass(frozen=True)
class TableScan:
    """One table's rows that match the filters (pickled to each Spark task): the
    archive (`archive`) or the message table, by queue, state and time (`since <=
    archived_at, or created_at, < until`, naive UTC). `only`: the columns to read
    (None: all)."""

    names: TableNames
    archive: bool
    queues: tuple[str, ...] | None
    since: datetime | None
    until: datetime | None
    states: tuple[str, ...] | None
    only: tuple[str, ...] | None = None

    def table(self, dialect: str) -> sa.Table:
        tables = QueueTables(self.names, dialect=dialect)
        return tables.archive if self.archive else tables.message

    def columns(self, table: sa.Table) -> list[sa.Column]:
        return [
            c
            for c in table.columns
            if c.name != "ready_at"  # MySQL's generated key
            and (self.only is None or c.name in self.only)
        ]

    def where(self, table: sa.Table) -> list[sa.ColumnElement[bool]]:
        time = table.c.archived_at if self.archive else table.c.created_at
        where: list[sa.ColumnElement[bool]] = []
        if self.queues is not None:
            where.append(table.c.queue.in_(self.queues))
        if self.states is not None:
            where.append(table.c.state.in_([MessageState(s) for s in self.states]))
        if self.since is not None:
            where.append(time >= self.since)
        if self.until is not None:
            where.append(time < self.until)
        return where


def scanned_columns(scan: TableScan, url: str) -> list[sa.Column]:
    """The columns `scan` reads, in table order, as the database of `url` stores them."""
    return scan.columns(scan.table(parse_url(url).get_backend_name()))


class IdSpan(NamedTuple):
    """The lowest and highest id of a scan's rows; both None when it has none."""

    low: int | None
    high: int | None


@dataclass(frozen=True, slots=True)
class ScanPage:
    """Rows of a scan, in id order: each row's values in the order of the reader's
    `columns`, and the id of the last row (the next page starts after it)."""

    rows: list[tuple[Any, ...]]
    last_id: int


class ScanReader:
    """`scan` on one engine: its table as that engine's database holds it."""

    def __init__(self, engine: AsyncEngine, scan: TableScan) -> None:
        self.engine = engine
        self.scan = scan
        self.table = scan.table(engine.dialect.name)
        self.columns = scan.columns(self.table)

    async def id_span(self) -> IdSpan:
        """One index read for each end (MIN and MAX of the primary key)."""
        t = self.table
        async with reading(self.engine) as conn:
            result = await conn.execute(
                sa.select(sa.func.min(t.c.id), sa.func.max(t.c.id)).where(*self.scan.where(t))
            )
            low, high = result.one()
        return IdSpan(low, high)

    async def page(self, start: int, end: int, limit: int) -> ScanPage | None:
        """Up to `limit` rows with ids in [start, end); None when there are none."""
        t = self.table
        async with reading(self.engine) as conn:
            # the id first, for the next page, whether or not it was asked for
            result = await conn.execute(
                sa.select(t.c.id, *self.columns)
                .where(t.c.id >= start, t.c.id < end, *self.scan.where(t))
                .order_by(t.c.id)
                .limit(limit)
            )
            found = list(result)
        if not found:
            return None
        return ScanPage([tuple(row[1:]) for row in found], found[-1][0])
