"""The consumer's CPU instructions a message, counted rather than timed:
``python -m benchmarks.instructions [--databases ...] [--small 1000] [--large 3000]
[--baseline REF]``.

Not a scenario of the suite: it needs valgrind and takes minutes (Python runs some 40
times slower under callgrind). It exists because this machine's speed drifts with
whatever else runs on it, which paired timed runs cancel only in part: an instruction
count does not follow the machine's speed as closely: with one hash seed, repeated
counts on a quiet machine agree within about half a percent. A loaded machine still
moves them by several percent (a slower consumer polls and yields more often), so
count with nothing else running.

Each count runs a child process under ``valgrind --tool=callgrind``: our broker
draining a stored backlog with the no-op handler, as the drain scenario does, except
that claims are fixed at 1000 and outcomes are written a claim's worth at a time (the
adaptive claim and the timed flush follow the consumer's speed, which valgrind divides
by forty). Each database is counted at ``--small`` and at ``--large`` messages: imports,
start and stop cost the same in both, so the difference over the difference in messages
is the instructions a message. Only the consumer is counted; on SQLite that includes
the database engine, which runs in the consumer's process.

With ``--baseline REF``, REF is checked out into a temporary worktree (as
``benchmarks.run --baseline`` does) and counted by its own copy of this module, then
the working tree; the ratio printed is baseline / working tree (above 1: fewer
instructions now).
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

from .baseline import checkout, remove
from .common import REPO, CountDown, clear_ours, fresh_target, make_targets, timed_drain
from .ours import preinsert, subscribe_no_op_handler, verify_drained

COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)
#: what each side prints per database, read back under --baseline
RESULT = re.compile(r"^drain on (\w+): ([\d,]+) instructions a message", re.MULTILINE)
DRAIN_CLAIMS = "1000"
#: seconds an outcome waits for its batch to fill: the longest allowed, so a claim's
#: outcomes are written together even at valgrind's speed
FLUSH_INTERVAL = 60.0


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
    ]  # fmt: skip
    # one hash seed for every run: dict and set layouts, and so the work, repeat
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"{' '.join(step)} failed under valgrind:\n{done.stderr[-3000:]}"
        raise RuntimeError(msg)
    return collected_instructions(done.stderr)


async def _drain_child(url: str, n: int) -> None:
    broker = SqlaBroker(url, logger=None)
    countdown = CountDown(n)
    subscribe_no_op_handler(
        broker, countdown, batch=False, claims=DRAIN_CLAIMS, flush_interval=FLUSH_INTERVAL
    )
    await broker.connect()
    await timed_drain(broker, countdown, n)


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


def count_here(databases: list[str], sizes: tuple[int, int]) -> dict[str, float]:
    """Instructions a message of this tree's drain, by database (printed as they come)."""
    found: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, target in make_targets(databases, Path(tmp)).items():
            asyncio.run(fresh_target(name, target.url))
            found[name] = per_message(*((n, drain_instructions(target.url, n)) for n in sizes))
            print(f"drain on {name}: {found[name]:,.0f} instructions a message", flush=True)
    return found


def count_baseline(ref: str, argv: list[str]) -> dict[str, float]:
    """The same counts by REF's own copy of this module, in a temporary worktree."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = checkout(ref, Path(tmp))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.instructions", *argv],
                cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                capture_output=True, text=True, check=True,
            )  # fmt: skip
        finally:
            remove(tree)
    return {db: float(n.replace(",", "")) for db, n in RESULT.findall(done.stdout)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "drain":
        asyncio.run(_drain_child(sys.argv[2], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--databases", default="sqlite,postgresql,mysql")
    parser.add_argument("--small", type=int, default=1000, help="messages in the small run")
    parser.add_argument("--large", type=int, default=3000, help="messages in the large run")
    parser.add_argument("--baseline", help="a git revision to count as well, then compare")
    args = parser.parse_args()
    # asyncmy logs the benchmark databases' "already exists" notes as warnings
    logging.getLogger("asyncmy").setLevel(logging.ERROR)
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt install valgrind)")
    databases = args.databases.split(",")
    sizes = (args.small, args.large)
    base: dict[str, float] = {}
    if args.baseline:
        side = ["--databases", args.databases, "--small", str(args.small)]
        base = count_baseline(args.baseline, [*side, "--large", str(args.large)])
        for db, n in base.items():
            print(f"baseline {args.baseline} drain on {db}: {n:,.0f} instructions a message")
    here = count_here(databases, sizes)
    for db in databases:
        if db in base:
            print(f"{db}: baseline / working tree {base[db] / here[db]:.3f}")


if __name__ == "__main__":
    main()
