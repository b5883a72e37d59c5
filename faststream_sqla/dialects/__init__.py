"""Pick the SQL for a database once per engine."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import QueueTables

from .base import Dialect, Outcome

__all__ = ("Dialect", "Outcome", "dialect_for")


def dialect_for(engine: AsyncEngine, tables: QueueTables) -> Dialect:
    name = engine.dialect.name
    tables = tables.for_dialect(name)
    if name == "postgresql":
        from .postgresql.dialect import PostgresDialect

        return PostgresDialect(tables)
    if name in ("mysql", "mariadb"):
        from .mysql.dialect import MySQLDialect

        return MySQLDialect(tables)
    if name == "sqlite":
        from .sqlite.dialect import SQLiteDialect

        return SQLiteDialect(tables)
    msg = f"database {shown(name)} is not supported: use PostgreSQL, MySQL/MariaDB or SQLite"
    raise InvalidOptionError(msg)
