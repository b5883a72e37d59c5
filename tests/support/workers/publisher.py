"""A publisher in a process of its own, driven line by line on stdin.

Usage: publisher.py DATABASE_URL. Prints READY once its broker is connected (it has no
subscribers), then answers each line with one line:
- `publish QUEUE BODY [DELAY]`: publishes BODY to QUEUE, due DELAY seconds from now
  if given, prints `PUBLISHED <id>`;
- `checkpoint` (SQLite): copies the WAL into the database file and empties it, prints
  `CHECKPOINTED <busy> <WAL size in bytes>` (busy 0: the checkpoint completed).
End of input stops it.
"""

import asyncio
import logging
import os
import sqlite3
import sys

from sqlalchemy.engine import make_url

from faststream_sqla import SqlaBroker

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)


def checkpoint(url: str) -> str:
    path = make_url(url).database
    conn = sqlite3.connect(path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    return f"CHECKPOINTED {busy} {os.path.getsize(f'{path}-wal')}"


async def main(url: str) -> None:
    async with SqlaBroker(url, logger=logging.getLogger("publisher")) as broker:
        await broker.connect()
        print("READY", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            command, *args = line.split()
            if command == "publish":
                queue, body, *delay = args
                options = {"delay": float(delay[0])} if delay else {}
                published = await broker.publish(body, queue=queue, **options)
                print("PUBLISHED", published, flush=True)
            elif command == "checkpoint":
                print(checkpoint(url), flush=True)
            else:
                raise SystemExit(f"unknown command {line!r}")


asyncio.run(main(sys.argv[1]))
