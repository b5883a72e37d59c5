"""Alembic environment of faststream-sqla.

Normally driven by `faststream_sqla.migrations`, which hands over a live connection in
`config.attributes["connection"]` and the table names in `config.attributes["table_names"]`.
Run by the plain `alembic` command instead, it opens an async engine on `sqlalchemy.url`.
Logging is left to the host application: no ini file is read.
"""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.migrations import version_table_for
from faststream_sqla.schema import TableNames

config = context.config
version_table = version_table_for(config.attributes.get("table_names", TableNames()))


def create_version_table(connection: Connection) -> None:
    """MariaDB/MySQL: the version table as Alembic makes it, but with its primary key
    unnamed. Alembic names it `<table>_pkc`, which these servers ignore with a warning
    (a line on stderr in a plain script); it creates the table only where missing."""
    sa.Table(
        version_table,
        sa.MetaData(),
        sa.Column("version_num", sa.String(32), primary_key=True),
    ).create(connection, checkfirst=True)


def run_migrations(connection: Connection) -> None:
    if connection.dialect.name == "mysql":
        create_version_table(connection)
    context.configure(connection=connection, version_table=version_table)
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations(url: str) -> None:
    # NullPool: this engine lives for one run, no connection should outlive it.
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run_migrations)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        version_table=version_table,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()
elif (connection := config.attributes.get("connection")) is not None:
    run_migrations(connection)
else:
    asyncio.run(run_async_migrations(config.get_main_option("sqlalchemy.url")))
