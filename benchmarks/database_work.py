"""The database's own work for each drained message, counted rather than timed:
``python -m benchmarks.database_work [--databases sqlite,mysql] [--messages 20000]
[--batch] [--baseline REF]``.

Not a scenario of the suite: a counter that does not follow the host's speed, for a
machine whose timed figures drift by tens of percent within minutes. It drains a stored
backlog as the drain scenario does (`benchmarks.ours.drain_once`) and counts, from the
broker's start to its stop:

- SQLite: virtual-machine instructions, through sqlite3's progress handler called at
  every instruction on every connection the drain opens, by statement text;
- MariaDB: the server's handler calls and sorted rows (``SHOW GLOBAL STATUS``), so
  nothing else may use the server meanwhile.

Both are exact for one build of the database: a plan that sorts, scans or copies more
rows shows up as a number, not as a percent of noise. They say nothing of client-side
Python, which ``benchmarks.instructions`` counts. PostgreSQL has no counter of the kind
without an extension, so it is not counted.

With ``--baseline REF``, REF is checked out into a temporary worktree and its package
drains under this module's counting (a child process with REF first on the path), then
the working tree's; the ratio printed is working tree / baseline (above 1: more work
now).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the MariaDB status counters read, as SHOW STATUS names them
MYSQL_COUNTERS = re.compile(r"^(Handler_(?!commit|rollback|prepare|savepoint).*|Sort_rows)$")
#: numbers, quoted text and repeated row groups in a statement, so one shape is one key
_LITERALS = re.compile(r"'[^']*'|\b\d+\b")
_REPEATS = re.compile(r"(\([^()]*\))(?:, \([^()]*\))+")


def statement_shape(sql: str) -> str:
    """A statement's text with its literals and repeated VALUES rows folded, so the
    flushes of one statement of different sizes count as one."""
    text = _LITERALS.sub("?", " ".join(sql.split()))
    return _REPEATS.sub(r"\1, ...", text)[:120]


class SQLiteCounter:
    """Counts virtual-machine instructions by statement on every sqlite3 connection
    opened while installed."""

    def __init__(self) -> None:
        self.instructions: collections.Counter[str] = collections.Counter()
        self.counting = False
        self._connect: Callable[..., sqlite3.Connection] = sqlite3.connect

    def install(self) -> None:
        counter = self

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = counter._connect(*args, **kwargs)
            running = ["(none)"]  # per connection: each runs on its own thread

            def traced(sql: str) -> None:
                running[0] = statement_shape(sql)

            def step() -> int:
                if counter.counting:
                    counter.instructions[running[0]] += 1
                return 0  # 0: carry on

            conn.set_trace_callback(traced)
            conn.set_progress_handler(step, 1)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]


async def mysql_status(url: str) -> dict[str, int]:
    """The server's status counters of interest, through a connection of its own."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, poolclass=sa.NullPool)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SHOW GLOBAL STATUS"))).all()
    finally:
        await engine.dispose()
    return {name: int(value) for name, value in rows if MYSQL_COUNTERS.match(name)}


async def count_drain(database: str, messages: int, *, batch: bool) -> dict[str, Any]:
    """One drain of `messages` on `database`, counted (see the module docstring)."""
    from benchmarks import ours
    from benchmarks.common import fresh_target, make_targets

    tmp = Path(tempfile.mkdtemp(prefix="fsqla-work-"))
    target = make_targets([database], tmp)[database]
    await fresh_target(database, target.url)
    sqlite_counter = SQLiteCounter()
    if database == "sqlite":
        sqlite_counter.install()
    found: dict[str, Any] = {}
    timed = ours.timed_drain

    async def counted_drain(broker: Any, countdown: Any, n: int, *rest: Any) -> float:
        before = await mysql_status(target.url) if database == "mysql" else {}
        sqlite_counter.counting = True
        try:
            return await timed(broker, countdown, n, *rest)
        finally:
            sqlite_counter.counting = False
            if database == "mysql":
                after = await mysql_status(target.url)
                found["counters"] = {k: (after[k] - before[k]) / n for k in after}

    ours.timed_drain = counted_drain  # drain_once looks it up at each call
    result = await ours.drain_once(target.url, messages, claims="100-1000", batch=batch)
    if result.get("problem"):
        raise RuntimeError(result["problem"])
    if database == "sqlite":
        found["counters"] = {k: v / messages for k, v in sqlite_counter.instructions.items()}
    return found


def total(database: str, counters: dict[str, float]) -> float:
    """The one figure per database: SQLite's instructions, MariaDB's handler calls."""
    return sum(counters.values())


def run_child(tree: Path, database: str, messages: int, *, batch: bool) -> dict[str, float]:
    """`count_drain` with `tree`'s package and benchmarks first on the path."""
    command = [sys.executable, str(Path(__file__).resolve()), "child", database,
               str(messages), "batch" if batch else "single"]  # fmt: skip
    done = subprocess.run(
        command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the drain in {tree} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.splitlines()[-1])["counters"])


def report(title: str, counters: dict[str, float], database: str, top: int) -> None:
    unit = "VM instructions" if database == "sqlite" else "handler calls"
    print(f"{title}: {total(database, counters):,.1f} {unit} a message")
    for name, value in sorted(counters.items(), key=lambda kv: -kv[1])[:top]:
        if value >= 0.05:
            print(f"  {value:9.2f}  {name}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        database, messages, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        found = asyncio.run(count_drain(database, messages, batch=mode == "batch"))
        print(json.dumps(found))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--databases", default="sqlite,mysql")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--batch", action="store_true", help="a batch subscriber's drain")
    parser.add_argument("--baseline", help="a git revision to count as well, then compare")
    parser.add_argument("--top", type=int, default=8, help="statements or counters listed")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]
    for database in args.databases.split(","):
        if database not in ("sqlite", "mysql"):
            raise SystemExit(f"counts sqlite and mysql only, not {database!r}")
        base: dict[str, float] | None = None
        if args.baseline:
            from benchmarks.baseline import checkout, remove

            with tempfile.TemporaryDirectory() as tmp:
                tree = checkout(args.baseline, Path(tmp))
                try:
                    base = run_child(tree, database, args.messages, batch=args.batch)
                finally:
                    remove(tree)
            report(f"baseline {args.baseline}, {database}", base, database, args.top)
        here = run_child(repo, database, args.messages, batch=args.batch)
        report(f"working tree, {database}", here, database, args.top)
        if base is not None:
            ratio = total(database, here) / total(database, base)
            print(f"{database}: working tree / baseline {ratio:.3f}")


if __name__ == "__main__":
    main()
