"""Disrupt several worker processes again and again while they drain a queue: SIGKILL
one of them (`workers`), or have the server cut every connection they hold
(`connections`: `pg_terminate_backend`, MariaDB's `KILL CONNECTION`).

A backlog is published to the queue "chaos"; `workers` processes (chaos/worker.py)
drain it, each recording every value it handles in `chaos_handled`. Now and then one
of them is killed with SIGKILL and a new one started in its place (or the server cuts
all their connections, which they must replace by themselves). Once everything is
archived the survivors stop gracefully and the run checks that:

- every message ended COMPLETED in the archive and none is left in the message table
  (nothing stuck), and every value was handled (nothing lost);
- values handled more than once (duplicates) are counted: only messages in flight at a
  kill can be, so there are at most kills x (largest claim + handlers) of them;
- the workers' logs hold a few lines per disruption, not a traceback per message.

The short form (the test suite) kills when given fractions of the backlog are handled,
so kills land mid-drain whatever the machine's speed; the long form kills every few
seconds, while it keeps publishing for `--duration` seconds at `--rate` a second on
top of the backlog: `python -m chaos.kill_workers --url URL --duration 600 --rate 500
--kill-every 3 [--disrupt connections]`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import MessageState, QueueTables
from faststream_sqla.urls import masked

WORKER = Path(__file__).resolve().parent / "worker.py"
QUEUE = "chaos"
HANDLED = sa.Table(
    "chaos_handled", sa.MetaData(), sa.Column("value", sa.Integer), sa.Column("pid", sa.Integer)
)
#: a killed process's claims come back after this (seconds); kept short so a run ends
RELEASE_STUCK_TIMEOUT = 2.0
#: the most messages a worker process can hold: its largest claim plus its handlers
HELD_PER_PROCESS = 1000 + 4
POLL_SECONDS = 0.05


#: the other sessions of this database, which the server is told to end
_KILL_SESSIONS = {
    "postgresql": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    "mysql": "SELECT id FROM information_schema.processlist "
             "WHERE db = DATABASE() AND id <> CONNECTION_ID()",
}


@dataclass
class KillReport:
    database: str
    disrupted: str
    messages: int
    workers: int
    kills: int
    seconds: float
    completed: int
    lost: int
    stuck: int
    duplicates: int
    other_states: dict[str, int] = field(default_factory=dict)
    #: lines the workers logged (warnings and errors), and how many were tracebacks
    log_lines: int = 0
    tracebacks: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.completed == self.messages and self.lost == 0 and self.stuck == 0
            and not self.other_states
            and self.duplicates <= self.kills * HELD_PER_PROCESS
        )


class Workers:
    """The worker processes, each started and waited for until it consumes. A killed
    one's replacement starts in the background, so the next kill is not held up by a
    process start (a fast drain could otherwise end before the last kill)."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url, self.log_dir = url, log_dir
        self.procs: list[asyncio.subprocess.Process] = []
        self.starting: set[asyncio.Task[asyncio.subprocess.Process]] = set()
        self.started = 0

    async def start_one(self) -> asyncio.subprocess.Process:
        self.started += 1
        log = (self.log_dir / f"worker-{self.started}.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), self.url, str(RELEASE_STUCK_TIMEOUT),
            stdout=asyncio.subprocess.PIPE, stderr=log,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"READY":
            raise RuntimeError(f"worker {self.started} did not start; see {log.name}")
        self.procs.append(proc)
        return proc

    async def kill_one(self, turn: int) -> None:
        if not self.procs:  # every running one was killed: wait for a replacement
            await asyncio.wait(self.starting, return_when=asyncio.FIRST_COMPLETED)
        victim = self.procs.pop(turn % len(self.procs))
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        replacement = asyncio.create_task(self.start_one())
        self.starting.add(replacement)
        replacement.add_done_callback(self.starting.discard)

    def log_counts(self) -> tuple[int, int]:
        """Lines logged by every worker so far, and the tracebacks among them."""
        lines = tracebacks = 0
        for log in self.log_dir.glob("worker-*.log"):
            text = log.read_text(errors="replace").splitlines()
            lines += sum(1 for line in text if line.startswith(("WARNING:", "ERROR:", "CRITICAL:")))
            tracebacks += sum(1 for line in text if line.startswith("Traceback"))
        return lines, tracebacks

    async def stop_all(self) -> None:
        failed = [
            result for result in await asyncio.gather(*self.starting, return_exceptions=True)
            if isinstance(result, BaseException)
        ]
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        if failed:
            raise RuntimeError(f"a replacement worker did not start; logs in {self.log_dir}") from failed[0]


async def _count(engine: AsyncEngine, table: sa.Table, *where: sa.ColumnElement[bool]) -> int:
    for attempt in range(3):  # a connection cut by the server mid-count is retried
        try:
            async with engine.connect() as conn:
                query = sa.select(sa.func.count()).select_from(table).where(*where)
                return int(await conn.scalar(query))
        except sa.exc.DBAPIError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _cut_connections(engine: AsyncEngine) -> None:
    """Have the server end every other session of the database (the workers')."""
    async with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            await conn.execute(sa.text(_KILL_SESSIONS["postgresql"]))
            return
        for session in (await conn.execute(sa.text(_KILL_SESSIONS["mysql"]))).scalars():
            try:
                await conn.execute(sa.text(f"KILL CONNECTION {int(session)}"))
            except sa.exc.DBAPIError:
                pass  # it ended by itself meanwhile


PUBLISH_BATCH = 100


async def _keep_publishing(url: str, first: int, count: int, rate: int) -> None:
    """Publish values first..first+count-1, `rate` a second, in batches of 100."""
    if count <= 0:
        return
    async with SqlaBroker(url, logger=None) as publisher:
        began = time.monotonic()
        for start in range(first, first + count, PUBLISH_BATCH):
            await publisher.publish_batch(*range(start, start + PUBLISH_BATCH), queue=QUEUE)
            due = began + (start - first + PUBLISH_BATCH) / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # the publishing schedule


async def _prepare(engine: AsyncEngine, tables: QueueTables) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(HANDLED.metadata.drop_all)
        await conn.run_sync(HANDLED.metadata.create_all)
        await conn.execute(tables.message.delete())
        await conn.execute(tables.archive.delete())


async def run_kill_workers(
    url: str,
    *,
    messages: int,
    workers: int = 3,
    kill_at: Sequence[float] = (),
    kill_every: float | None = None,
    disrupt: str = "workers",
    publish_seconds: float = 0.0,
    rate: int = 1000,
    log_dir: Path,
    timeout: float = 600.0,
) -> KillReport:
    """Drain `messages` with `workers` processes, disrupting them (`disrupt`: "workers"
    or "connections") when each fraction of `kill_at` of the backlog has been handled,
    or every `kill_every` seconds; meanwhile publish `rate` more a second for
    `publish_seconds`."""
    # NullPool: the run's own connections live for one query, out of a cut's way
    engine = create_async_engine(url, poolclass=NullPool)
    tables = QueueTables()
    crew = Workers(url, log_dir)
    kills = 0
    feeder: asyncio.Task[None] | None = None
    if disrupt == "connections" and engine.dialect.name not in _KILL_SESSIONS:
        raise ValueError(f"{engine.dialect.name} has no connections to cut")

    async def disruption(turn: int) -> None:
        if disrupt == "workers":
            await crew.kill_one(turn)
        else:
            await _cut_connections(engine)

    try:
        await _prepare(engine, tables)
        async with SqlaBroker(url) as publisher:
            for start in range(0, messages, 1000):
                await publisher.publish_batch(
                    *range(start, min(messages, start + 1000)), queue=QUEUE
                )
        extra = int(publish_seconds * rate) // PUBLISH_BATCH * PUBLISH_BATCH
        # Workers start one after another, a second or so each: the queue stays paused
        # until all are up, or the first could drain the backlog before the second is
        # ready, and before this loop could disrupt anything.
        async with QueueAdmin(engine) as admin:
            await admin.pause_queue(QUEUE)
            for _ in range(workers):
                await crew.start_one()
            await admin.resume_queue(QUEUE)
        began = time.monotonic()
        feeder = asyncio.create_task(_keep_publishing(url, messages, extra, rate))
        messages += extra
        pending_kills = sorted(kill_at)
        next_kill = began + kill_every if kill_every else None
        while await _count(engine, tables.archive) < messages:
            if feeder.done() and feeder.exception() is not None:
                raise RuntimeError("publishing failed") from feeder.exception()
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"not drained within {timeout}s; logs in {log_dir}")
            if pending_kills and await _count(engine, HANDLED) >= pending_kills[0] * messages:
                pending_kills.pop(0)
                await disruption(kills)
                kills += 1
            elif next_kill is not None and time.monotonic() >= next_kill:
                await disruption(kills)
                kills += 1
                next_kill = time.monotonic() + kill_every  # type: ignore[operator]
            else:
                await asyncio.sleep(POLL_SECONDS)  # a poll of another process's writes
        seconds = time.monotonic() - began
        await feeder  # done: everything it published is archived
        await crew.stop_all()

        async with engine.connect() as conn:
            states = dict(
                (await conn.execute(
                    sa.select(tables.archive.c.state, sa.func.count()).group_by(tables.archive.c.state)
                )).all()
            )
            handled_values = (await conn.execute(
                sa.select(HANDLED.c.value, sa.func.count()).group_by(HANDLED.c.value)
            )).all()
        completed = states.pop(MessageState.COMPLETED, 0)
        log_lines, tracebacks = crew.log_counts()
        return KillReport(
            database=engine.dialect.name,
            disrupted=disrupt,
            messages=messages,
            workers=workers,
            kills=kills,
            seconds=round(seconds, 2),
            completed=completed,
            lost=messages - len(handled_values),
            stuck=await _count(engine, tables.message),
            duplicates=sum(count - 1 for _, count in handled_values),
            other_states={str(k): v for k, v in states.items()},
            log_lines=log_lines,
            tracebacks=tracebacks,
        )
    finally:
        if feeder is not None and not feeder.done():
            feeder.cancel()
        await crew.stop_all()
        async with engine.begin() as conn:
            await conn.run_sync(HANDLED.metadata.drop_all)
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a database with the queue tables")
    parser.add_argument("--messages", type=int, default=20_000, help="backlog at the start")
    parser.add_argument("--duration", type=float, default=0.0,
                        help="seconds to keep publishing (and killing) on top of the backlog")
    parser.add_argument("--rate", type=int, default=1000, help="messages a second meanwhile")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--disrupt", choices=("workers", "connections"), default="workers",
                        help="SIGKILL a worker, or have the server cut their connections")
    parser.add_argument("--log-dir", type=Path, default=Path("chaos-logs"))
    args = parser.parse_args(argv)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run_kill_workers(
        args.url, messages=args.messages, workers=args.workers,
        kill_every=args.kill_every, disrupt=args.disrupt, log_dir=args.log_dir,
        publish_seconds=args.duration, rate=args.rate, timeout=args.duration + 600,
    ))
    table = Table(title=f"chaos ({args.disrupt}) on {masked(args.url)}")
    for name in ("value", "figure"):
        table.add_column(name)
    for key, value in asdict(report).items():
        table.add_row(key, str(value))
    table.add_row("verdict", "OK" if report.ok else "FAILED")
    Console().print(table)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
