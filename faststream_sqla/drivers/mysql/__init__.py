"""MySQL 8 and MariaDB through asyncmy: the driver (`driver.py`), the channel claim
(`channel_claim.py`) and the adapter to asyncmy's connection (`_asyncmy.py`). Nothing
is imported here, so a module of this package can be imported without asyncmy."""
