"""Pick the SQL for a database once per engine."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.exceptions import InvalidOptionError, ReplicaMismatchError, shown
from faststream_sqla.schema import QueueTables

from .base import Driver, Outcome

__all__ = ("Driver", "Outcome", "check_replica_kind", "driver_for")


def driver_for(engine: AsyncEngine, tables: QueueTables) -> Driver:
    name = engine.dialect.name
    tables = tables.for_dialect(name)
    if name == "postgresql":
        from .postgresql.driver import PostgresDriver

        return PostgresDriver(tables)
    if name in ("mysql", "mariadb"):
        from .mysql.driver import MySQLDriver

        return MySQLDriver(tables)
    if name == "sqlite":
        from .sqlite.driver import SQLiteDriver

        return SQLiteDriver(tables)
    msg = f"database {shown(name)} is not supported: use PostgreSQL, MySQL/MariaDB or SQLite"
    raise InvalidOptionError(msg)


#: the dialect names of one kind of database (SQLAlchemy calls MariaDB either)
_KINDS = {"mariadb": "mysql"}


def check_replica_kind(primary: AsyncEngine, replica: AsyncEngine) -> None:
    """ReplicaMismatchError unless `replica` is the same kind of database as `primary`."""
    kinds = [_KINDS.get(e.dialect.name, e.dialect.name) for e in (primary, replica)]
    if kinds[0] != kinds[1]:
        msg = (
            f"read_url is a {replica.dialect.name} database, the primary a "
            f"{primary.dialect.name} one: a replica holds the same kind of database as "
            "its primary"
        )
        raise ReplicaMismatchError(msg)
