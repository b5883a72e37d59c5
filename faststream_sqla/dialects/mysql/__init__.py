"""MySQL 8 and MariaDB through asyncmy: the dialect (`dialect.py`), the channel claim
(`channel_claim.py`) and the adapter to asyncmy's connection (`_asyncmy.py`)."""

from .dialect import MySQLDialect

__all__ = ["MySQLDialect"]
