"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--databases ...] [--scenarios ...]``,
or ``--baseline REF`` to compare the plain path with another revision (benchmarks/baseline.py).

Every figure is also shown as a ratio to the baselines measured in the same run: the raw
driver ceiling (``raw``), FastStream's own consume path without a database
(``pipeline``), and the peer libraries (``sqlbroker``: faststream-sqlbroker,
``pgqueuer``). Results go to a table on stdout and, with ``--json``, to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from . import report
from .common import (
    DATABASES,
    LABELS,
    PROCESSES_CLAIMS,
    Results,
    Target,
    durability_settings,
    fresh_target,
    make_targets,
    run_json_subprocess,
)

SCENARIOS = (
    "raw", "pipeline", "drain", "drain-batch", "publish", "latency", "scale", "sustained",
    "processes", "options", "snapshot", "admin", "sqlbroker", "pgqueuer",
)
ALIASES = {"peers": ("sqlbroker", "pgqueuer"), "drain": ("drain", "drain-batch")}

FULL: dict[str, Any] = {
    "raw_n": 100_000,               # messages per raw ceiling
    "raw_single": 2_000,            # single-row inserts for the raw single-publish ceiling
    "pipeline_n": 50_000,           # process_message calls, per logging setting
    "repeats": 3,                   # pipeline, batch drains, peers: median of this many
    "drain_pairs": 5,               # single-message drains, each between pipeline runs
    "drain_n": 20_000,              # pre-inserted messages per drain (ours and peers)
    "drain_claims": "100-1000,100,500,1000",  # claim sizes tried: the default, then fixed
    "publish_single": 2_000,        # sequential publish() calls
    "publish_batch": 50_000,        # messages sent by publish_batch(1000)
    "latency_rate": 200,            # offered msg/s
    "latency_seconds": 10,
    "latency_fast_interval": 0.1,   # a second latency run with this max_fetch_interval
    "scale_small": 10_000,          # queued rows, small backlog
    "scale_big": 1_000_000,         # queued rows, big backlog
    "scale_claim": 5_000,           # messages claimed+archived per measurement
    "scale_limit": 100,             # claim size (the default fetch_batch_size)
    "scale_archive": 1_000_000,     # archived rows for the big-archive measurement
    "scale_one_timestamp": 100_000,  # queued rows sharing one next_attempt_at
    "scale_rss": 4_000,             # messages drained by the RSS process
    "sustained_n": 300_000,         # messages per long drain, vacuums on and off
    "processes_n": 40_000,          # messages for faststream run --workers 1 / 2
    "options_pairs": 3,             # options: keyed runs, each between two plain ones
    "options_keys": 1_000,          # ordering keys, messages interleaved over them
    "options_per_key": 100,
    "options_priority_small": 10_000,   # queued rows over the 11 priorities, small backlog
    "options_priority_big": 1_000_000,  # and big
    "options_priority_claim": 5_000,    # messages claimed+archived per measurement
    "options_publish": 20_000,      # messages per publish_batch(1000) run, keyed or not
    "options_fast_single": 1_000,   # sequential publish() calls, fast_publish or not
    "snapshot_n": 1_000_000,        # snapshot: drained with and without a held snapshot
    "admin_small": 10_000,          # admin: reads with this many queued and archived ...
    "admin_big": 1_000_000,         # ... against this many (ratio big/small)
    "admin_moved": 100_000,         # admin: rows redriven, then pruned
}
QUICK: dict[str, Any] = {
    **FULL,
    "raw_n": 3_000,
    "raw_single": 100,
    "pipeline_n": 2_000,
    "repeats": 1,
    "drain_pairs": 1,
    "drain_n": 1_000,
    "publish_single": 100,
    "publish_batch": 2_000,
    "latency_seconds": 1,
    "scale_small": 1_000,
    "scale_big": 20_000,
    "scale_claim": 500,
    "scale_archive": 20_000,
    "scale_one_timestamp": 5_000,
    "scale_rss": 300,
    "sustained_n": 2_000,
    "processes_n": 2_000,
    "options_pairs": 1,
    "options_keys": 50,
    "options_per_key": 20,
    "options_priority_small": 1_000,
    "options_priority_big": 20_000,
    "options_priority_claim": 500,
    "options_publish": 2_000,
    "options_fast_single": 100,
    "snapshot_n": 3_000,
    "admin_small": 1_000,
    "admin_big": 20_000,
    "admin_moved": 2_000,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, for CI (1-3 min)")
    p.add_argument("--databases", default=",".join(DATABASES),
                   help="comma-separated: sqlite,postgresql,mysql (default: all)")
    p.add_argument("--scenarios", default="all",
                   help=f"comma-separated from {', '.join(SCENARIOS)}, or peers, or all")
    p.add_argument("--json", type=Path, help="write every figure, ratio and setting here")
    p.add_argument("--markdown", type=Path, help="write the table as markdown here")
    p.add_argument("--baseline", metavar="REF",
                   help="instead of the suite: the plain drain and publish scenarios of git "
                        "revision REF and of the working tree, in alternating runs, with "
                        "the median ratio of --pairs pairs")
    p.add_argument("--pairs", type=int, default=3, help="pairs of runs for --baseline")
    p.add_argument("--size", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a size, e.g. drain_n=50000 (keys: {', '.join(FULL)})")
    args = p.parse_args(argv)
    args.databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    names: list[str] = []
    for s in args.scenarios.split(","):
        s = s.strip()
        if s == "all":
            names += SCENARIOS
        elif s in ALIASES:
            names += ALIASES[s]
        elif s in SCENARIOS:
            names.append(s)
        elif s:
            p.error(f"unknown scenario {s!r}")
    args.scenarios = [s for s in SCENARIOS if s in names]
    sizes = dict(QUICK if args.quick else FULL)
    for item in args.size:
        key, _, value = item.partition("=")
        if key not in sizes:
            p.error(f"unknown size {key!r}")
        sizes[key] = type(sizes[key])(value)
    args.sizes = sizes
    return args


def cpu_model() -> str:
    """The processor's name as Linux reports it: runs on different hosts differ most in
    how fast Python runs against the servers, which moves the ratios."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("faststream-sqla", "faststream", "sqlalchemy", "asyncpg", "asyncmy",
                 "aiosqlite", "faststream-sqlbroker", "pgqueuer", "uvloop"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


class LogCounter(logging.Handler):
    """Counts the warnings and errors the libraries log during the run (they go to a file)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {record.name}: {record.getMessage()[:80]}"] += 1


def setup_logging(tmpdir: Path) -> LogCounter:
    warnings.filterwarnings("ignore", module="asyncmy")
    warnings.filterwarnings("ignore", message=".*ignored for PRIMARY key.*")
    root = logging.getLogger()
    file_handler = logging.FileHandler(tmpdir / "bench.log")
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    counter = LogCounter()
    root.addHandler(file_handler)
    root.addHandler(counter)
    root.setLevel(logging.WARNING)
    logging.getLogger("benchmarks").setLevel(logging.INFO)  # scenario markers, file only
    return counter


async def timed(
    timings: dict[str, float], key: str, results: Results, scenario: str, database: str,
    fn: Callable[[], Awaitable[Any]],
) -> Any:
    t0 = time.perf_counter()
    print(f"- {scenario} on {LABELS.get(database, database)} ...", file=sys.stderr, flush=True)
    logging.getLogger("benchmarks").info("scenario %s on %s", scenario, database)
    try:
        return await fn()
    except Exception as e:  # noqa: BLE001 - one scenario failing must not stop the run
        results.error(scenario, database, "scenario", e)
        return None
    finally:
        timings[key] = time.perf_counter() - t0


async def run(args: argparse.Namespace, tmpdir: Path) -> dict[str, Any]:
    from . import admin, options, ours, pairs, pipeline, processes, raw, snapshot

    sz = args.sizes
    results = Results()
    targets = make_targets(args.databases, tmpdir)
    settings: dict[str, Any] = {}
    for db, target in targets.items():
        await fresh_target(db, target.url)
        settings[db] = await durability_settings(target)
    print_settings(settings, sz, args)

    timings: dict[str, float] = {}
    scen = set(args.scenarios)
    claim_specs = str(sz["drain_claims"]).split(",")

    def each(name: str, fn: Callable[[Target], Awaitable[Any]]) -> list[Awaitable[Any]]:
        return [
            timed(timings, f"{name}/{db}", results, name, db, functools.partial(fn, t))
            for db, t in targets.items()
        ]

    if "raw" in scen:
        for job in each("raw", lambda t: raw.run_raw(t, sz["raw_n"], sz["raw_single"], results)):
            await job
    if "pipeline" in scen:
        await timed(timings, "pipeline", results, "pipeline", "-",
                    lambda: pipeline.run_pipeline(sz["pipeline_n"], results, tmpdir,
                                                  int(sz["repeats"])))
    if "drain" in scen:
        for job in each("drain", lambda t: ours.run_drain(t, sz["drain_n"], claim_specs,
                                                          results, batch=False,
                                                          repeats=int(sz["drain_pairs"]))):
            await job
    if "drain-batch" in scen:
        for job in each("drain-batch", lambda t: ours.run_drain(t, sz["drain_n"], claim_specs,
                                                                results, batch=True,
                                                                repeats=int(sz["repeats"]))):
            await job
    if "publish" in scen:
        for job in each("publish", lambda t: ours.run_publish(
                t, sz["publish_single"], sz["publish_batch"], results)):
            await job
    if "latency" in scen:
        async def latency(t: Target) -> None:
            await ours.run_latency(t, sz["latency_rate"], sz["latency_seconds"], results)
            if sz["latency_fast_interval"]:
                await ours.run_latency(t, sz["latency_rate"], sz["latency_seconds"], results,
                                       max_fetch_interval=sz["latency_fast_interval"])

        for job in each("latency", latency):
            await job
    if "scale" in scen:
        for job in each("scale", lambda t: ours.run_scale(
                t, small=sz["scale_small"], big=sz["scale_big"], claim_n=sz["scale_claim"],
                archive_rows=sz["scale_archive"], one_timestamp=sz["scale_one_timestamp"],
                rss_n=sz["scale_rss"],
                limit=sz["scale_limit"], results=results)):
            await job
    if "sustained" in scen:
        if "postgresql" in targets:  # the only database whose broker vacuums
            await timed(timings, "sustained/postgresql", results, "sustained", "postgresql",
                        lambda: ours.run_sustained(targets["postgresql"], sz["sustained_n"],
                                                   results))
        else:
            results.error("sustained", "-", "skipped", "needs postgresql in --databases")
    if "processes" in scen:
        if "postgresql" in targets:
            # The default claims and the largest fixed size the drains try: per-statement
            # server work per message differs between them, and two processes share the
            # server.
            for claims in PROCESSES_CLAIMS:
                await timed(
                    timings, f"processes/postgresql/{claims}", results, "processes",
                    "postgresql",
                    lambda claims=claims: processes.run_processes(
                        targets["postgresql"], sz["processes_n"], claims, results,
                        tmpdir / "processes.log",
                    ),
                )
        else:
            results.error("processes", "-", "skipped", "needs postgresql in --databases")
    if "options" in scen:
        for job in each("options", lambda t: options.run_options(t, sz, results)):
            await job
    if "snapshot" in scen:
        for job in each("snapshot", lambda t: snapshot.run_long_snapshot(
                t, sz["snapshot_n"], results)):
            await job
    if "admin" in scen:
        for job in each("admin", lambda t: admin.run_admin(
                t, sz["admin_small"], sz["admin_big"], sz["admin_moved"], results)):
            await job
    peer_args = {
        "drain_n": sz["drain_n"], "repeats": sz["repeats"], "n_single": sz["publish_single"],
        "n_batch": sz["publish_batch"], "latency_rate": sz["latency_rate"],
        "latency_seconds": sz["latency_seconds"],
    }
    peer_timeout = 600 + 30 * sz["drain_n"] / 1000

    async def merge(module: str, target: Target) -> None:
        out = await run_json_subprocess(
            module, {**peer_args, "database": target.database, "url": target.peer_url},
            timeout=peer_timeout,
        )
        results.figures += out["figures"]
        results.errors += out["errors"]
        for e in out["errors"]:
            print(f"  ! {e['scenario']}/{e['database']}/{e['what']}: {e['error'][:300]}",
                  file=sys.stderr, flush=True)

    if "sqlbroker" in scen:
        for job in each("sqlbroker", lambda t: merge("benchmarks.peers.sqlbroker_peer", t)):
            await job
    if "pgqueuer" in scen:
        if "postgresql" in targets:
            await timed(timings, "pgqueuer/postgresql", results, "pgqueuer", "postgresql",
                        lambda: merge("benchmarks.peers.pgqueuer_peer", targets["postgresql"]))
        else:
            results.error("pgqueuer", "-", "skipped", "PostgreSQL only: add postgresql")
    # Our drains set against each peer's side by side, where both ran in this run.
    rounds = int(sz["repeats"])
    if "sqlbroker" in scen and "drain" in scen:
        for job in each("paired sqlbroker", lambda t: pairs.run_pairs(
                t, "faststream-sqlbroker", peer_args, rounds, results, timeout=peer_timeout)):
            await job
    if "pgqueuer" in scen and "drain-batch" in scen and "postgresql" in targets:
        await timed(timings, "paired pgqueuer/postgresql", results, "paired pgqueuer", "postgresql",
                    lambda: pairs.run_pairs(targets["postgresql"], "pgqueuer", peer_args, rounds,
                                            results, timeout=peer_timeout))

    report.add_ratios(results)
    return {"settings": settings, "timings_s": timings, "results": results}


def print_settings(settings: dict[str, Any], sizes: dict[str, Any], args: argparse.Namespace
                   ) -> None:
    print("Durability settings (what a commit costs):")
    for db, s in settings.items():
        print(f"  {LABELS[db]:<11} " + ", ".join(f"{k}={v}" for k, v in s.items()))
    print(f"Machine: {os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    print("Sizes: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    print("Scenarios: " + ", ".join(args.scenarios), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.baseline:
        return compare_with_baseline(args)
    tmpdir = Path(tempfile.mkdtemp(prefix="fsqla-bench-"))
    counter = setup_logging(tmpdir)
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    out = asyncio.run(run(args, tmpdir))
    duration = time.perf_counter() - t0
    results: Results = out["results"]
    print()
    report.print_table(results)
    report.print_errors(results)
    print(f"\nRun time: {duration:.0f} s. Library warnings/errors logged: "
          f"{sum(counter.counts.values())} (log: {tmpdir / 'bench.log'})")
    document = {
        "command": " ".join(["python -m benchmarks.run", *(argv if argv is not None
                                                           else sys.argv[1:])]),
        "started_at": started.isoformat(),
        "duration_s": duration,
        "quick": args.quick,
        "databases": args.databases,
        "scenarios": args.scenarios,
        "sizes": args.sizes,
        "machine": {"cpus": os.cpu_count(), "cpu_model": cpu_model(),
                    "platform": platform.platform()},
        "versions": versions(),
        "settings": out["settings"],
        "timings_s": out["timings_s"],
        "figures": results.figures,
        "errors": results.errors,
        "library_log": dict(counter.counts.most_common(30)),
        "log_file": str(tmpdir / "bench.log"),
    }
    if args.json:
        args.json.write_text(json.dumps(document, indent=2, default=str))
        print(f"JSON: {args.json}")
    if args.markdown:
        args.markdown.write_text(report.markdown(results))
        print(f"Markdown: {args.markdown}")
    for name in os.listdir(tmpdir):  # keep the log, drop the SQLite files
        if name.startswith("bench") and not name.endswith(".log"):
            path = tmpdir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return 0


def compare_with_baseline(args: argparse.Namespace) -> int:
    from . import baseline

    extra = ["--databases", ",".join(args.databases)]
    extra += ["--quick"] if args.quick else []
    for item in args.size:
        extra += ["--size", item]
    rows = baseline.compare(args.baseline, pairs=max(args.pairs, 1), extra=extra)
    baseline.print_comparison(args.baseline, rows)
    if args.json:
        args.json.write_text(json.dumps({"baseline": args.baseline, "figures": rows}, indent=2))
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
