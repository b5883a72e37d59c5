"""``python -m benchmarks.run --baseline REF``: the plain scenarios of another git
revision side by side with the working tree, in one run.

The revision is checked out into a temporary git worktree and each side runs its own
``benchmarks.run`` with its own package (``PYTHONPATH``), in alternating subprocesses:
baseline, working tree, baseline, working tree, ... so host drift falls on both sides
alike. Each figure's ratio is taken per pair (working tree / baseline) and the median of
the pairs is reported. No option of the new features is in use on either side: this is
the guard that the plain path did not slow down.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the scenarios compared: our plain drains and publishes, each with its paired ratio
PLAIN_SCENARIOS = "pipeline,drain,publish"
#: the figures that decide: rates of ours, and ratios already paired inside one run
DECIDING = ("msg_per_s", "over_paired_pipeline", "batch_msg_per_s", "single_msg_per_s")


def checkout(ref: str, into: Path) -> Path:
    """`ref` as a detached worktree under `into`."""
    target = into / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(target), ref],
        check=True,
    )
    return target


def remove(worktree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False
    )


def run_side(tree: Path, out: Path, extra: list[str]) -> dict[str, float]:
    """One run of `tree`'s own benchmark suite; its figures by (scenario, metric, db)."""
    command = [
        sys.executable, "-m", "benchmarks.run", "--scenarios", PLAIN_SCENARIOS,
        "--json", str(out), *extra,
    ]
    subprocess.run(
        command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
        stdout=subprocess.DEVNULL,
    )
    figures: dict[str, float] = {}
    for figure in json.loads(out.read_text())["figures"]:
        if figure["system"] == "faststream-sqla":
            key = f"{figure['scenario']}/{figure['metric']}/{figure['database']}"
            figures[key] = figure["value"]
    return figures


def compare(ref: str, *, pairs: int, extra: list[str]) -> list[dict[str, Any]]:
    """Median over `pairs` of working tree / baseline, per figure both sides report."""
    work = Path(tempfile.mkdtemp(prefix="fsqla-baseline-"))
    baseline = checkout(ref, work)
    try:
        ratios: dict[str, list[float]] = {}
        values: dict[str, tuple[list[float], list[float]]] = {}
        for i in range(pairs):
            print(f"- baseline {ref}, pair {i + 1} of {pairs} ...", file=sys.stderr, flush=True)
            old = run_side(baseline, work / f"baseline-{i}.json", extra)
            print(f"- working tree, pair {i + 1} of {pairs} ...", file=sys.stderr, flush=True)
            new = run_side(ROOT, work / f"working-{i}.json", extra)
            for key in old.keys() & new.keys():
                if not key.split("/")[1].endswith(DECIDING) or not old[key]:
                    continue
                ratios.setdefault(key, []).append(new[key] / old[key])
                values.setdefault(key, ([], []))
                values[key][0].append(old[key])
                values[key][1].append(new[key])
        return [
            {
                "figure": key,
                "baseline": statistics.median(values[key][0]),
                "working_tree": statistics.median(values[key][1]),
                "ratio": statistics.median(found),
                "pair_ratios": found,
            }
            for key, found in sorted(ratios.items())
        ]
    finally:
        remove(baseline)
        shutil.rmtree(work, ignore_errors=True)


def print_comparison(ref: str, rows: list[dict[str, Any]]) -> None:
    print(f"\nWorking tree against {ref} (median of pairs; ratio > 1 is faster now):")
    print(f"{'figure':48s} {'baseline':>12s} {'now':>12s} {'ratio':>7s}  pairs")
    for row in rows:
        pair_text = " ".join(f"{r:.2f}" for r in row["pair_ratios"])
        print(
            f"{row['figure']:48s} {row['baseline']:>12.1f} {row['working_tree']:>12.1f} "
            f"{row['ratio']:>7.2f}  {pair_text}"
        )
