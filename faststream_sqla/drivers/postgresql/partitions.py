"""PostgreSQL: the archive range-partitioned by month of `archived_at`.

`partition_archive` turns the archive into a partitioned table once (in one
transaction, rows kept); `maintain_partitions` then creates the months ahead and drops
the months past retention, which frees their space at once where a prune deletes row
by row. A DEFAULT partition catches rows outside every month, so an archive never fails
for want of a partition; creating a month moves its rows out of the default first.

Partitions are named `<archive>_pYYYYMM` and `<archive>_pdefault`. The primary key
becomes (id, archived_at), as partitioning requires; `inspect` and replay look ids up
in every partition through the parent table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.drivers.catalogue import load_catalogue
from faststream_sqla.exceptions import InvalidOptionError, require_whole, shown
from faststream_sqla.schema import QueueTables

MAX_MONTHS_AHEAD = 24


@dataclass(frozen=True)
class PartitionReport:
    partitioned: bool
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    #: every month partition now there, oldest first
    months: list[str] = field(default_factory=list)


def _month(day: date, offset: int = 0) -> date:
    index = day.year * 12 + day.month - 1 + offset
    return date(index // 12, index % 12 + 1, 1)


def _require_postgresql(engine: AsyncEngine) -> None:
    if engine.dialect.name != "postgresql":
        msg = f"archive partitions are a PostgreSQL feature; this database is {engine.dialect.name}"
        raise InvalidOptionError(msg)


def _fixed(name: str) -> str:
    """A catalogue statement that names no table of ours (the partition DDL below
    names tables made up per month, so it stays code)."""
    return load_catalogue("faststream_sqla.drivers.postgresql").without_tables(name)


async def is_partitioned(conn: AsyncConnection, table: str) -> bool:
    kind = await conn.scalar(sa.text(_fixed("table_kind")), {"t": table})
    return kind == "p"


async def _months(conn: AsyncConnection, archive: str) -> list[tuple[str, date]]:
    names = (
        await conn.execute(
            sa.text(_fixed("partitions_of")),
            {"t": archive},
        )
    ).scalars()
    pattern = re.compile(rf"^{re.escape(archive)}_p([0-9]{{4}})([0-9]{{2}})$")
    found = []
    for name in names:
        if match := pattern.match(name):
            found.append((name, date(int(match.group(1)), int(match.group(2)), 1)))
    return sorted(found, key=lambda item: item[1])


async def _create_month(
    conn: AsyncConnection, q: sa.sql.compiler.IdentifierPreparer, archive: str, month: date
) -> str:
    """One month's partition; rows of that month already in the default move into it."""
    name = f"{archive}_p{month:%Y%m}"
    low, high = month, _month(month, 1)
    bounds = {"low": datetime(low.year, low.month, 1), "high": datetime(high.year, high.month, 1)}
    default, holding = q.quote(f"{archive}_pdefault"), q.quote(f"{archive}_pmoving")
    await conn.exec_driver_sql(f"CREATE TEMP TABLE {holding} (LIKE {q.quote(archive)})")
    await conn.execute(
        sa.text(
            f"WITH moved AS (DELETE FROM {default} WHERE archived_at >= :low "
            f"AND archived_at < :high RETURNING *) INSERT INTO {holding} SELECT * FROM moved"
        ),
        bounds,
    )
    await conn.exec_driver_sql(
        f"CREATE TABLE {q.quote(name)} PARTITION OF {q.quote(archive)} "
        f"FOR VALUES FROM ('{low.isoformat()}') TO ('{high.isoformat()}')"
    )
    await conn.exec_driver_sql(f"INSERT INTO {q.quote(archive)} SELECT * FROM {holding}")
    await conn.exec_driver_sql(f"DROP TABLE {holding}")
    return name


async def partition_archive(
    engine: AsyncEngine, tables: QueueTables, *, months_ahead: int = 3
) -> PartitionReport:
    """Make the archive a table partitioned by month, keeping its rows; nothing to do
    when it already is one. Run it while workers are stopped or quiet: it holds an
    exclusive lock on the archive while it copies the rows."""
    _require_postgresql(engine)
    _check_months(months_ahead)
    archive = tables.archive.name
    q = engine.dialect.identifier_preparer
    async with engine.begin() as conn:
        if await is_partitioned(conn, archive):
            return PartitionReport(True, months=[n for n, _ in await _months(conn, archive)])
        old = f"{archive}_unpartitioned"
        index = f"ix_{archive}_queue_state"
        await conn.exec_driver_sql(f"LOCK TABLE {q.quote(archive)} IN ACCESS EXCLUSIVE MODE")
        await conn.exec_driver_sql(f"ALTER TABLE {q.quote(archive)} RENAME TO {q.quote(old)}")
        await conn.exec_driver_sql(
            f"ALTER INDEX {q.quote(index)} RENAME TO {q.quote(index + '_old')}"
        )
        await conn.exec_driver_sql(
            f"ALTER TABLE {q.quote(old)} RENAME CONSTRAINT {q.quote(archive + '_pkey')} "
            f"TO {q.quote(old + '_pkey')}"
        )
        await conn.exec_driver_sql(
            f"CREATE TABLE {q.quote(archive)} (LIKE {q.quote(old)} INCLUDING DEFAULTS) "
            "PARTITION BY RANGE (archived_at)"
        )
        await conn.exec_driver_sql(
            f"ALTER TABLE {q.quote(archive)} ADD CONSTRAINT {q.quote(archive + '_pkey')} "
            "PRIMARY KEY (id, archived_at)"
        )
        await conn.exec_driver_sql(
            f"CREATE INDEX {q.quote(index)} ON {q.quote(archive)} (queue, state, archived_at)"
        )
        # BRIN: a few pages of summaries serve time-range reads over months of archive
        await conn.exec_driver_sql(
            f"CREATE INDEX {q.quote(f'ix_{archive}_archived_brin')} ON {q.quote(archive)} "
            "USING brin (archived_at)"
        )
        await conn.exec_driver_sql(
            f"CREATE TABLE {q.quote(archive + '_pdefault')} PARTITION OF {q.quote(archive)} DEFAULT"
        )
        oldest = await conn.scalar(sa.text(f"SELECT min(archived_at) FROM {q.quote(old)}"))
        today = datetime.now(timezone.utc).date()
        first = _month(oldest.date() if oldest is not None else today)
        created = []
        month = first
        while month <= _month(today, months_ahead):
            created.append(await _create_month(conn, q, archive, month))
            month = _month(month, 1)
        await conn.exec_driver_sql(f"INSERT INTO {q.quote(archive)} SELECT * FROM {q.quote(old)}")
        await conn.exec_driver_sql(f"DROP TABLE {q.quote(old)}")
    return PartitionReport(True, created=created, months=created)


async def maintain_partitions(
    engine: AsyncEngine,
    tables: QueueTables,
    *,
    months_ahead: int = 3,
    retention: timedelta | None = None,
) -> PartitionReport:
    """Create the months up to `months_ahead` from now and, given a `retention`, drop
    the months that ended longer ago than that. Safe while workers run."""
    _require_postgresql(engine)
    _check_months(months_ahead)
    if retention is not None and (
        not isinstance(retention, timedelta) or retention <= timedelta(0)
    ):
        raise InvalidOptionError(f"retention must be a positive timedelta, got {shown(retention)}")
    archive = tables.archive.name
    q = engine.dialect.identifier_preparer
    async with engine.begin() as conn:
        if not await is_partitioned(conn, archive):
            msg = (
                f"the archive {archive} is not partitioned; run: faststream-sqla archive "
                "partition (PostgreSQL)"
            )
            raise InvalidOptionError(msg)
        existing = dict((month, name) for name, month in await _months(conn, archive))
        today = datetime.now(timezone.utc).date()
        created = []
        month = _month(today)
        while month <= _month(today, months_ahead):
            if month not in existing:
                created.append(await _create_month(conn, q, archive, month))
            month = _month(month, 1)
        dropped = []
        if retention is not None:
            cutoff = datetime.now(timezone.utc).replace(tzinfo=None) - retention
            for month, name in sorted(existing.items()):
                end = _month(month, 1)
                if datetime(end.year, end.month, 1) <= cutoff:
                    await conn.exec_driver_sql(f"DROP TABLE {q.quote(name)}")
                    dropped.append(name)
        months = [n for n, _ in await _months(conn, archive)]
    return PartitionReport(True, created=created, dropped=dropped, months=months)


def _check_months(months_ahead: object) -> None:
    require_whole("months_ahead", months_ahead, MAX_MONTHS_AHEAD, low=0)
