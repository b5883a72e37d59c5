"""Worker processes (the scripts in workers/) for the tests that run several: start them
together, read their lines, stop them and check how they ended."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from tests.support.helpers import wait_until

#: the worker scripts the process tests run
WORKERS = Path(__file__).resolve().parent / "workers"
#: how long a subprocess may take to print its next line: a deadline for a process that
#: hangs or died, generous because a starting Python's imports share two cores with
#: the rest of the suite (a Spark JVM among them)
LINE_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0


@asynccontextmanager
async def spawn(
    *argv: str | Path, log: Path, pipe: bool = True, **kwargs
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Start a subprocess with stderr (and stdout unless `pipe`) in `log`; kill it at exit."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *map(str, argv),
            stdout=asyncio.subprocess.PIPE if pipe else out,
            stderr=out,
            **kwargs,
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def read_line(proc: asyncio.subprocess.Process, log: Path) -> str:
    """The subprocess's next stdout line; fails with its stderr if it died instead."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), LINE_TIMEOUT)
    assert line, f"subprocess exited early:\n{log.read_text()}"
    return line.decode().strip()


async def exit_code(proc: asyncio.subprocess.Process) -> int:
    try:
        return await asyncio.wait_for(proc.wait(), EXIT_TIMEOUT)
    except asyncio.TimeoutError:
        pytest.fail(f"process {proc.pid} did not exit within {EXIT_TIMEOUT}s")


@asynccontextmanager
async def started_together(
    argvs: list[tuple[str | Path, ...]], logs: list[Path]
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Start one process per argv (scripts that print READY and wait for a line on
    stdin: workers/together.py), then release them at once, so that none gets a head
    start. They are killed at exit if still running."""
    async with AsyncExitStack() as stack:
        procs = [
            await stack.enter_async_context(
                spawn(*argv, log=log, stdin=asyncio.subprocess.PIPE)
            )
            for argv, log in zip(argvs, logs, strict=True)
        ]
        for proc, log in zip(procs, logs):
            assert await read_line(proc, log) == "READY"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"GO\n")
            await proc.stdin.drain()
        yield procs


async def run_until(
    procs: list[asyncio.subprocess.Process], logs: list[Path], done, *, timeout: float = 60
) -> None:
    """Wait until `done()` holds (failing with the processes' logs), then stop every
    process with SIGTERM and check that each exited cleanly."""
    try:
        await wait_until(done, timeout=timeout)
    except TimeoutError:
        pytest.fail("not done in time:\n" + "\n".join(log.read_text() for log in logs))
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc, log in zip(procs, logs):
        assert await exit_code(proc) == 0, log.read_text()


@asynccontextmanager
async def publisher_process(url: str, log: Path) -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    """A publisher in a process of its own (workers/publisher.py), connected: yields
    `command(line)`, which sends it one command line and returns its reply."""
    async with spawn(sys.executable, WORKERS / "publisher.py", url, log=log,
                     stdin=asyncio.subprocess.PIPE) as proc:
        assert await read_line(proc, log) == "READY"
        assert proc.stdin is not None

        async def command(line: str) -> str:
            proc.stdin.write(f"{line}\n".encode())
            await proc.stdin.drain()
            return await read_line(proc, log)

        yield command
        proc.stdin.close()
        assert await exit_code(proc) == 0, log.read_text()
