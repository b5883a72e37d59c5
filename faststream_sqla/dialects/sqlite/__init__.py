"""SQLite through aiosqlite: the dialect (`dialect.py`), the channel claim
(`channel_claim.py`) and the adapter to aiosqlite's thread (`_aiosqlite.py`)."""
