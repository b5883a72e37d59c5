"""Fail a PostgreSQL primary over to its streaming standby mid-drain, and account for
every message.

A throwaway primary and standby (chaos/servers.py `ReplicatedPostgres`, synchronous or
asynchronous replication); `workers` worker processes (chaos/worker.py, each recording
what it handles in a file of its own, since the database may forget recent writes) and
a publisher on the multi-host URL (`?host=P1&host=P2&target_session_attrs=read-write`).
A backlog is published; once a share of it is handled the primary's postmaster is
SIGKILLed, the standby promoted `promote_after` seconds later, and the publisher goes on
at `rate` a second throughout. The run then reports:

- acked: publishes that returned; lost: those never handled (0 with a synchronous
  standby: an acknowledged publish is on it);
- duplicates, each with its cause: claimed before the promotion and again after it with
  the same `deliveries_count` (its claim was lost with the old primary) or a higher one
  (its outcome was lost, and the claim released). Claim times, not handling times: a
  worker holds what it claimed through the outage and handles it once the database
  answers, which may be after the promotion;
- the first publish acknowledged after the promotion, how long after;
- stuck: messages still in the message table `settle` seconds after the promotion
  (release-stuck would take `release_stuck_timeout` to free them);
- restarts: worker processes that had to be started again (none may).

`python -m chaos.failover --mode sync|async --runs N` prints one row per run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from faststream_sqla import SqlaBroker, upgrade_schema
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import QueueTables

from .servers import ReplicatedPostgres

WORKER = Path(__file__).resolve().parent / "worker.py"
QUEUE = "chaos"
POLL_SECONDS = 0.05

CLAIM_LOST = "claim lost with the old primary"
OUTCOME_LOST = "outcome lost with the old primary"
UNEXPLAINED = "unexplained"


@dataclass
class FailoverReport:
    mode: str
    acked: int = 0
    unacked: int = 0
    lost: int = 0
    duplicates: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    first_publish_after_promotion: float | None = None
    drained_after_promotion: float | None = None
    stuck: int = 0
    restarts: int = 0
    #: per worker process: lines saying the database was lost, and said to be back
    outage_lines: list[int] = field(default_factory=list)
    recovery_lines: list[int] = field(default_factory=list)
    listener_failures: int = 0
    tracebacks: int = 0

    @property
    def ok(self) -> bool:
        return (
            (self.lost == 0 or self.mode == "async")
            and self.stuck == 0
            and self.restarts == 0
            and not self.causes.get(UNEXPLAINED)
            and self.first_publish_after_promotion is not None
        )


@dataclass
class Handled:
    value: int
    pid: int
    deliveries: int
    token: int
    at: float
    claimed_at: float


class Publisher:
    """Publishes one value at a time at `rate` a second on its own broker, noting which
    publishes were acknowledged and when."""

    def __init__(self, url: str, first: int, rate: float) -> None:
        self.url, self.next, self.rate = url, first, rate
        self.acked: dict[int, float] = {}
        self.unacked = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with SqlaBroker(self.url, logger=logging.getLogger("chaos.failover.publisher")) as broker:
            began = time.monotonic()
            sent = 0
            while not self.stop.is_set():
                value, self.next = self.next, self.next + 1
                try:
                    await broker.publish(value, queue=QUEUE)
                except Exception:  # noqa: BLE001 - counted: the gap's publishes fail
                    self.unacked += 1
                else:
                    self.acked[value] = time.time()
                sent += 1
                due = began + sent / self.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))  # the schedule


def read_handled(files: list[Path]) -> list[Handled]:
    """The complete lines of the workers' records: a worker may be writing the last."""
    handled = []
    for path in files:
        if not path.exists():
            continue
        text = path.read_text()
        for line in text[: text.rfind("\n") + 1].splitlines():
            value, pid, deliveries, token, at, claimed_at = line.split()
            handled.append(Handled(
                int(value), int(pid), int(deliveries), int(token), float(at), float(claimed_at)
            ))
    return handled


def explain(runs: list[Handled], promoted_at: float) -> list[str]:
    """The cause of each repeat of one value, in the order claimed. The old primary's
    backends serve on for a moment after its postmaster is killed (until they notice),
    and what they write then is lost too: the boundary is the promotion. A repeat whose
    two claims fall on the same side of it is unexplained: one database gave the same
    message to two claims."""
    runs = sorted(runs, key=lambda h: h.claimed_at)
    causes = []
    for before, again in zip(runs, runs[1:]):
        if not before.claimed_at < promoted_at <= again.claimed_at:
            causes.append(UNEXPLAINED)
        elif again.deliveries == before.deliveries:
            causes.append(CLAIM_LOST)
        else:
            causes.append(OUTCOME_LOST)
    return causes


async def start_worker(url: str, release_stuck_timeout: float, record: Path, log: Path,
                       handler_seconds: float) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), url, str(release_stuck_timeout), str(record),
        stdout=asyncio.subprocess.PIPE, stderr=log.open("wb"),
        env={**os.environ, "HANDLER_SECONDS": str(handler_seconds)},
    )
    assert proc.stdout is not None
    if (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() != b"READY":
        raise RuntimeError(f"a worker did not start; see {log}")
    return proc


async def run_failover(
    mode: str,
    *,
    log_dir: Path,
    backlog: int = 2000,
    rate: float = 100.0,
    workers: int = 3,
    kill_at: float = 0.3,
    promote_after: float = 1.0,
    publish_after: float = 2.0,
    settle: float = 45.0,
    release_stuck_timeout: float = 60.0,
    handler_seconds: float = 0.005,
) -> FailoverReport:
    """One failover; see the module's docstring. `settle` should stay below
    `release_stuck_timeout`, so that what is stuck shows as stuck."""
    if mode not in ("sync", "async"):
        raise ValueError(f"mode is sync or async, not {mode!r}")
    report = FailoverReport(mode)
    log_dir.mkdir(parents=True, exist_ok=True)
    records = [log_dir / f"handled-{i}.txt" for i in range(workers)]
    logs = [log_dir / f"worker-{i}.log" for i in range(workers)]
    for path in records:
        path.unlink(missing_ok=True)
    tables = QueueTables()
    async with ReplicatedPostgres(synchronous=mode == "sync") as pair:
        await upgrade_schema(pair.url)
        engine = create_async_engine(pair.url, poolclass=NullPool)
        procs: list[asyncio.subprocess.Process] = []
        publisher = Publisher(pair.url, backlog, rate)
        publishing: asyncio.Task[None] | None = None
        try:
            async with SqlaBroker(pair.url, logger=None) as broker:
                for start in range(0, backlog, 500):
                    await broker.publish_batch(*range(start, min(backlog, start + 500)), queue=QUEUE)
            acked_at = time.time()
            async with QueueAdmin(engine) as admin:
                await admin.pause_queue(QUEUE)  # every worker up before the drain starts
                procs += await asyncio.gather(*(
                    start_worker(pair.url, release_stuck_timeout, record, log, handler_seconds)
                    for record, log in zip(records, logs)
                ))
                await admin.resume_queue(QUEUE)
            publishing = asyncio.create_task(publisher.run())
            while len(read_handled(records)) < kill_at * backlog:
                await asyncio.sleep(POLL_SECONDS)  # other processes' progress: polled
            await pair.primary.kill()
            await asyncio.sleep(promote_after)  # the operator's (or Patroni's) delay
            await pair.standby.promote()
            promoted_at, promoted = time.time(), time.monotonic()
            await asyncio.sleep(publish_after)  # the publisher goes on meanwhile
            publisher.stop.set()
            await publishing

            async def left() -> int:
                async with engine.connect() as conn:
                    count = sa.select(sa.func.count()).select_from(tables.message)
                    return int(await conn.scalar(count))

            while (remaining := await left()) and time.monotonic() - promoted < settle:
                await asyncio.sleep(POLL_SECONDS)
            report.stuck = remaining
            if not remaining:
                report.drained_after_promotion = round(time.time() - promoted_at, 2)
            report.restarts = sum(proc.returncode is not None for proc in procs)
        finally:
            if publishing is not None and not publishing.done():
                publisher.stop.set()
                await asyncio.gather(publishing, return_exceptions=True)
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()
            await engine.dispose()
    report.restarts += sum(proc.returncode != 0 for proc in procs)

    acked = {value: acked_at for value in range(backlog)} | publisher.acked
    handled = read_handled(records)
    by_value: dict[int, list[Handled]] = defaultdict(list)
    for h in handled:
        by_value[h.value].append(h)
    report.acked, report.unacked = len(acked), publisher.unacked
    report.lost = sum(1 for value in acked if value not in by_value)
    causes: Counter[str] = Counter()
    for runs in by_value.values():
        causes.update(explain(runs, promoted_at))
    report.duplicates, report.causes = sum(causes.values()), dict(causes)
    after = [at for at in publisher.acked.values() if at >= promoted_at]
    if after:
        report.first_publish_after_promotion = round(min(after) - promoted_at, 3)
    for log in logs:
        text = log.read_text(errors="replace")
        report.outage_lines.append(text.count("lost the database"))
        report.recovery_lines.append(text.count("answers again"))
        report.listener_failures += text.count("notification listener failed")
        report.tracebacks += text.count("Traceback")
    return report


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=100.0, help="publishes a second")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--promote-after", type=float, default=2.0)
    parser.add_argument("--handler-seconds", type=float, default=0.01)
    parser.add_argument("--log-dir", type=Path, default=Path("chaos-logs/failover"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    table = Table(title=f"failover to a {args.mode}hronous standby")
    columns = ("run", "acked", "unacked", "lost", "duplicates (cause)", "first publish after "
               "promotion (s)", "drained after promotion (s)", "stuck", "restarts",
               "outage lines per worker", "listener failures", "verdict")
    for name in columns:
        table.add_column(name)
    ok = True
    for run in range(1, args.runs + 1):
        report = asyncio.run(run_failover(
            args.mode, log_dir=args.log_dir / f"{args.mode}-{run}", backlog=args.backlog,
            rate=args.rate, workers=args.workers, promote_after=args.promote_after,
            handler_seconds=args.handler_seconds,
        ))
        ok &= report.ok
        causes = ", ".join(f"{n} {cause}" for cause, n in report.causes.items()) or "-"
        table.add_row(
            str(run), str(report.acked), str(report.unacked), str(report.lost),
            f"{report.duplicates} ({causes})", str(report.first_publish_after_promotion),
            str(report.drained_after_promotion), str(report.stuck), str(report.restarts),
            ",".join(map(str, report.outage_lines)), str(report.listener_failures),
            "OK" if report.ok else "FAILED",
        )
    Console(width=200).print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
