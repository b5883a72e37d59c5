"""PostgreSQL through asyncpg: the driver (`driver.py`), the channel claim
(`channel_claim.py`), the archive's partitions (`partitions.py`) and the adapter to
asyncpg's connection (`_asyncpg.py`). Nothing is imported here: the admin API takes
`partitions` without asyncpg installed."""
