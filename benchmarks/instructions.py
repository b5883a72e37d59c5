"""The consumer's CPU instructions a message, counted rather than timed:
``python -m benchmarks.instructions [--databases ...] [--small 1000] [--large 3000]``.

Not a scenario of the suite: it needs valgrind, and it takes minutes (Python runs some
40 times slower under callgrind). It exists because some hosts' speed drifts by up to
1.7x between one tenth of a second and the next, which no pairing of timed runs can fully
cancel. An instruction count does not follow the machine's speed, and every run gets
the same hash seed, so repeated counts agree within about 0.5% (the figures are in
docs/benchmarks.md, thirteenth round).

Each measured step runs in a child process under ``valgrind --tool=callgrind``:

- ``pipeline``: FastStream's consume path with no database, as the pipeline scenario runs
  it (``benchmarks.pipeline.measure``);
- ``drain``: our broker draining a backlog with the no-op handler, as the drain scenario
  does, except that the backlog is stored by this process before the child starts, and
  that claims are fixed at 1000 and outcomes written 1000 at a time: the adaptive claim
  and the 50 ms outcome flush follow the consumer's speed, and under valgrind that
  speed is forty times lower than it really is.

Each runs twice, at ``--small`` and at ``--large`` messages. Imports, start and stop cost
the same in both, so the difference over the difference in messages is the instructions
a message. Only the consumer is counted; the database server runs outside valgrind.

The ratio printed is the pipeline's instructions a message over the drain's: the drain's
rate as a share of the pipeline's on a machine that executes instructions at one steady
speed, with the consumer never waiting for the database. On PostgreSQL and MariaDB the
timed ratio stays under it: a drain also waits, and runs fewer instructions a second (a
busier process misses its caches more, and the server works on the other core). On
SQLite the database engine runs inside the consumer's process, in aiosqlite's thread:
its instructions count here, although they partly run beside the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from faststream_sqla import SqlaBroker

from .common import REPO, CountDown, clear_ours, fresh_target, make_targets, timed_drain
from .ours import preinsert, subscribe_no_op_handler, verify_drained
from .pipeline import measure

COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)
DRAIN_CLAIMS = "1000"
#: seconds an outcome waits for its batch to fill: longer than any drain here
FLUSH_INTERVAL = 3600.0


def collected_instructions(valgrind_stderr: str) -> int:
    """The instruction count callgrind reports when its program exits."""
    found = COLLECTED.findall(valgrind_stderr)
    if not found:
        msg = f"no instruction count in valgrind's output:\n{valgrind_stderr[-2000:]}"
        raise RuntimeError(msg)
    return int(found[-1])


def per_message(small: tuple[int, int], large: tuple[int, int]) -> float:
    """Instructions a message from two (messages, instructions) runs."""
    (n_small, i_small), (n_large, i_large) = small, large
    if n_large <= n_small:
        msg = f"the large run ({n_large}) must handle more messages than the small ({n_small})"
        raise ValueError(msg)
    return (i_large - i_small) / (n_large - n_small)


def count(step: list[str]) -> int:
    """Run `python -m benchmarks.instructions <step>` under callgrind; its instructions."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "benchmarks.instructions", *step,
    ]
    # one hash seed for every run: dict and set layouts, and so the work, repeat
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        msg = f"{' '.join(step)} failed under valgrind:\n{done.stderr[-3000:]}"
        raise RuntimeError(msg)
    return collected_instructions(done.stderr)


async def _pipeline_child(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await measure(n, access_log=False, tmpdir=Path(tmp))


async def _drain_child(url: str, n: int) -> None:
    broker = SqlaBroker(url, logger=None)
    countdown = CountDown(n)
    # The drain scenario's subscriber, except for flush_interval: outcomes are written
    # a claim's worth at a time (the flush batch), not every 50 ms. At full speed a
    # 50 ms flush gathers 600-800 outcomes; under valgrind it gathered a few dozen, and
    # how many depended on the run's speed.
    subscribe_no_op_handler(
        broker, countdown, batch=False, claims=DRAIN_CLAIMS, flush_interval=FLUSH_INTERVAL
    )
    await broker.connect()
    # fails if the drain falls under timed_drain's floor rate, which a drain under
    # callgrind stays well above
    await timed_drain(broker, countdown, n)


def _child(argv: list[str]) -> None:
    if argv[0] == "pipeline":
        asyncio.run(_pipeline_child(int(argv[1])))
    else:
        asyncio.run(_drain_child(argv[1], int(argv[2])))


async def _stored_backlog(url: str, n: int) -> None:
    await clear_ours(url)
    await preinsert(url, n)


async def _check_drained(url: str, n: int) -> None:
    if problem := await verify_drained(url, n):
        raise RuntimeError(problem)


def drain_instructions(url: str, n: int) -> int:
    asyncio.run(_stored_backlog(url, n))
    instructions = count(["drain", url, str(n)])
    asyncio.run(_check_drained(url, n))
    return instructions


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("pipeline", "drain"):
        _child(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", default="sqlite,postgresql,mysql")
    parser.add_argument("--small", type=int, default=1000, help="messages in the small run")
    parser.add_argument("--large", type=int, default=3000, help="messages in the large run")
    args = parser.parse_args()
    # asyncmy logs the benchmark databases' "already exists" notes as warnings
    logging.getLogger("asyncmy").setLevel(logging.ERROR)
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt install valgrind)")
    sizes = (args.small, args.large)
    pipeline = per_message(*((n, count(["pipeline", str(n)])) for n in sizes))
    print(f"pipeline: {pipeline:,.0f} instructions a message", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        targets = make_targets(args.databases.split(","), Path(tmp))
        for name, target in targets.items():
            asyncio.run(fresh_target(name, target.url))
            drain = per_message(*((n, drain_instructions(target.url, n)) for n in sizes))
            print(f"drain on {name}: {drain:,.0f} instructions a message; "
                  f"pipeline / drain {pipeline / drain:.3f}", flush=True)


if __name__ == "__main__":
    main()
