"""Where PostgreSQL's CPU goes while the broker's claim and outcome statements drain a
backlog: ``python -m benchmarks.server_profile [--n 100000] [--limit 1000]``.

Not a scenario of the suite: it needs Linux ``perf`` and the right to sample every
process (root, or ``kernel.perf_event_paranoid`` at -1), which a fresh machine may not
give. It settles a backlog as the server-cost scenario does, samples the whole machine
with call graphs while the dialect claims ``--limit`` at a time and acknowledges them
(no handler, no FastStream), and prints, for the server's processes only:

- the server's CPU a message, read from ``/proc`` around the drain;
- the share of the server's samples under each part of the row work (a sample counts for
  every part on its stack, so the parts overlap: WAL records are written by the row
  changes above them);
- the functions the samples were in (self time).

The twelfth round of ``docs/benchmarks.md`` reads this output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from .common import clear_ours, fresh_target, make_targets
from .server_cost import ours_drain

#: what a server function does for the broker, by the function whose stack it is under
PARTS = (
    ("index entries inserted (claim's new row version, archive row)", "ExecInsertIndexTuples"),
    ("index scans (the claim's ready rows, rows found by id)", "index_getnext_slot"),
    ("row versions written by the claim", "heap_update"),
    ("row locks taken by the claim (SKIP LOCKED)", "heap_lock_tuple"),
    ("rows deleted by the outcome write", "heap_delete"),
    ("rows inserted into the archive", "heap_insert"),
    ("WAL records (inside the row changes above)", "XLogInsert"),
    ("rows copied into CTEs and sorts", "heap_form_minimal_tuple"),
    ("array parameters parsed", "array_in"),
    ("plans looked up or made", "GetCachedPlan"),
    ("commits", "CommitTransactionCommand"),
)

SERVER_COMMAND = "postgres"


def fold_perf_script(text: str, command: str = SERVER_COMMAND) -> list[list[str]]:
    """`perf script -F comm,ip,sym` output as one list of function names per sample of
    `command`, leaf first; "[unknown]" where perf cannot name a frame (a static
    function without a symbol)."""
    stacks: list[list[str]] = []
    frames: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            if frames is not None:
                stacks.append(frames)
            frames = None
        elif not line[0].isspace():  # a sample's header: the command name
            frames = [] if line.split()[0] == command else None
        elif frames is not None:
            _address, _, symbol = line.strip().partition(" ")
            frames.append(symbol.strip() or "[unknown]")
    if frames is not None:
        stacks.append(frames)
    return stacks


def part_shares(stacks: list[list[str]], parts: Iterable[tuple[str, str]] = PARTS
                ) -> list[tuple[str, float]]:
    """Each part's share of all samples: those with its function anywhere on the stack."""
    total = len(stacks) or 1
    return [(label, sum(function in s for s in stacks) / total) for label, function in parts]


def self_shares(stacks: list[list[str]], top: int = 15) -> list[tuple[str, float]]:
    total = len(stacks) or 1
    leaves = Counter(s[0] for s in stacks if s)
    return [(name, n / total) for name, n in leaves.most_common(top)]


@contextlib.asynccontextmanager
async def perf_recording(perf_data: Path) -> AsyncIterator[None]:
    """`perf record` of the whole machine, with call graphs, while the block runs."""
    perf = subprocess.Popen(
        ["perf", "record", "-F", "1999", "-a", "-g", "-o", str(perf_data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        await asyncio.sleep(1)  # perf has opened its buffers before the clock starts
        if perf.poll() is not None:
            error = perf.stderr.read().decode() if perf.stderr else ""
            msg = f"perf record failed: {error}"
            raise RuntimeError(msg)
        yield
    finally:
        if perf.poll() is None:
            perf.send_signal(signal.SIGINT)  # perf writes its file and exits
        perf.wait()


async def profile(n: int, limit: int, perf_data: Path) -> tuple[float, list[list[str]]]:
    """Drain n settled messages (server-cost's drain of ours) with perf sampling the
    machine; the server's CPU a message and the server's folded samples."""
    target = make_targets(["postgresql"], perf_data.parent)["postgresql"]
    await fresh_target("postgresql", target.url)
    server_us = await ours_drain(target, n, limit, during=perf_recording(perf_data))
    await clear_ours(target.url)
    script = subprocess.run(
        ["perf", "script", "-i", str(perf_data), "-F", "comm,ip,sym"],
        capture_output=True, text=True, check=True,
    ).stdout
    return server_us, fold_perf_script(script)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages to drain")
    parser.add_argument("--limit", type=int, default=1000, help="messages a claim")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("needs Linux perf (Debian: apt install linux-perf)")
    with tempfile.TemporaryDirectory() as tmp:
        server_us, stacks = asyncio.run(profile(args.n, args.limit, Path(tmp) / "perf.data"))
    print(f"server CPU: {server_us:.1f} µs a message over {args.n:,} "
          f"(claims of {args.limit}); {len(stacks):,} samples of the server's processes")
    print("\nunder each part of the work (overlapping):")
    for label, share in part_shares(stacks):
        print(f"  {100 * share:5.1f}%  {label}")
    print("\nin each function (self):")
    for name, share in self_shares(stacks):
        print(f"  {100 * share:5.1f}%  {name}")


if __name__ == "__main__":
    main()
