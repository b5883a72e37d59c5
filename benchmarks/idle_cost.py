"""What idle consumers cost: ``python -m benchmarks.idle_cost [--databases sqlite,mysql]``.

`--processes` subscriber processes (8) with nothing to consume run for `--seconds` (60)
with the cross-process wake-up source off (each subscriber polls at its default
max_fetch_interval, 1 s) and then on (the MariaDB or SQLite watcher; PostgreSQL's
LISTEN). On a server database a window of the same length with none of them running
comes first: what the server does anyway, on a machine other work shares.

Each window reports the server's CPU time (its processes' utime + stime in /proc), the
statements it ran (MariaDB: the growth of the global `Questions` counter), the
subscriber processes' own CPU time (SQLite's whole cost: there is no server) and the
looks their watchers made, all over the window alone. Start-up is left out: the clock
starts `SETTLE` seconds after every process said it was ready. The figures are the
whole server's: another client's work lands in them too, which the empty window shows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from .common import DATABASES, LABELS, REPO, cpu_seconds, fresh_target, make_targets
from .common import server_cpu_seconds as server_cpu

#: seconds between the last READY and the start of the clock: the subscribers' first
#: claims and control reads, and the schema check, are start-up, not idling
SETTLE = 3.0
#: how long a subscriber may take to start or stop
PROCESS_TIMEOUT = 60.0


def process_cpu(pid: int) -> float:
    """CPU time (user + system) of one live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return cpu_seconds(int(fields[11]) + int(fields[12]))


async def statements_run(url: str) -> int | None:
    """MariaDB's count of statements the server has run (this one included); None
    elsewhere."""
    if not url.startswith("mysql"):
        return None
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(sa.text("SHOW GLOBAL STATUS LIKE 'Questions'"))).one()
    finally:
        await engine.dispose()
    return int(row[1])


async def snapshot(
    database: str, url: str, procs: list[asyncio.subprocess.Process]
) -> dict[str, Any]:
    looks = 0
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"looks\n")
        await proc.stdin.drain()
        looks += int((await line_of(proc)).removeprefix("LOOKS "))
    return {
        "server_cpu_s": server_cpu(database),
        "statements": await statements_run(url),
        "subscribers_cpu_s": sum(process_cpu(proc.pid) for proc in procs),
        "looks": looks,
    }


async def start_subscriber(url: str, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.apps.idle_subscriber", url, mode,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=str(REPO),
    )  # fmt: skip


async def line_of(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), PROCESS_TIMEOUT)
    if not line:
        msg = f"idle subscriber {proc.pid} exited with {await proc.wait()}"
        raise RuntimeError(msg)
    return line.decode().strip()


async def measure(
    database: str, url: str, mode: str, processes: int, seconds: float
) -> dict[str, Any]:
    """One window: `mode` "none" (no subscriber), "off" or "on"."""
    procs = []
    try:
        if mode != "none":
            procs = [await start_subscriber(url, mode) for _ in range(processes)]
            for proc in procs:
                if (line := await line_of(proc)) != "READY":
                    raise RuntimeError(f"idle subscriber said {line!r}")
        await asyncio.sleep(SETTLE)
        before = await snapshot(database, url, procs)
        await asyncio.sleep(seconds)
        after = await snapshot(database, url, procs)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            await asyncio.wait_for(proc.wait(), PROCESS_TIMEOUT)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    figures: dict[str, Any] = {
        "database": database, "mode": mode, "seconds": seconds, "processes": len(procs),
    }  # fmt: skip
    for key in ("server_cpu_s", "statements", "subscribers_cpu_s", "looks"):
        if before[key] is None or after[key] is None:
            figures[key] = None
            continue
        figures[key] = after[key] - before[key]
    if figures["statements"] is not None:
        figures["statements"] -= 1  # the second reading's own SHOW STATUS
        figures["statements_per_s"] = figures["statements"] / seconds
    for key in ("server_cpu_s", "subscribers_cpu_s"):
        if figures[key] is not None:
            figures[key.replace("_s", "_pct_of_core")] = 100 * figures[key] / seconds
    return figures


def shown(window: dict[str, Any]) -> str:
    parts = [f"{LABELS[window['database']]:<10} {window['mode']:<4}"]
    if window["server_cpu_s"] is not None:
        parts.append(
            f"server {window['server_cpu_s']:.2f} s CPU "
            f"({window['server_cpu_pct_of_core']:.2f}% of a core)"
        )
    if window["statements"] is not None:
        parts.append(f"{window['statements']} statements ({window['statements_per_s']:.1f}/s)")
    if window["processes"]:
        parts.append(
            f"{window['processes']} subscribers {window['subscribers_cpu_s']:.2f} s CPU "
            f"({window['subscribers_cpu_pct_of_core']:.2f}% of a core), {window['looks']} looks"
        )
    return ", ".join(parts)


async def run(databases: list[str], processes: int, seconds: float) -> list[dict[str, Any]]:
    windows = []
    with tempfile.TemporaryDirectory() as tmp:
        for database, target in make_targets(databases, Path(tmp)).items():
            await fresh_target(database, target.url)
            modes = ("off", "on") if database == "sqlite" else ("none", "off", "on")
            for mode in modes:
                window = await measure(database, target.url, mode, processes, seconds)
                print(shown(window), flush=True)
                windows.append(window)
    return windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--databases", default="sqlite,mysql", help=f"comma-separated: {','.join(DATABASES)}"
    )
    parser.add_argument("--processes", type=int, default=8, help="idle subscriber processes")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each window")
    parser.add_argument("--json", type=Path, help="write every window's figures here")
    args = parser.parse_args()
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    windows = asyncio.run(run(databases, args.processes, args.seconds))
    if args.json:
        args.json.write_text(json.dumps({"windows": windows}, indent=2))


if __name__ == "__main__":
    main()
