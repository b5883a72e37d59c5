"""PostgreSQL through asyncpg: the dialect (`dialect.py`), the channel claim
(`channel_claim.py`) and the adapter to asyncpg's connection (`_asyncpg.py`)."""

from .dialect import PostgresDialect

__all__ = ["PostgresDialect"]
