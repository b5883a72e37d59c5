"""SQLite through aiosqlite: the driver (`driver.py`), the channel claim
(`channel_claim.py`) and the adapter to aiosqlite's thread (`_aiosqlite.py`)."""
