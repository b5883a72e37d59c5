"""Pick the SQL for a database once per engine."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import QueueTables

from .base import Driver, Outcome

__all__ = ("Driver", "Outcome", "driver_for")


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
