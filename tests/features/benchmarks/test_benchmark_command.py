"""The benchmark command runs end to end at its tiny size, every scenario on every
database, peers included (no timing thresholds: the figures only have to exist)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ALL_DIALECTS, DIALECTS

pytestmark = pytest.mark.slow

#: the databases the run may use: those FSQLA_DIALECTS keeps (SQLite alone needs no server)
RUN_ON = [db for db in ALL_DIALECTS if db in DIALECTS]

REPO = Path(__file__).resolve().parents[3]

EXPECTED = [
    ("raw", "raw", "publish_msg_per_s", "sqlite"),
    ("raw", "raw", "claim_archive_msg_per_s", "sqlite"),
    ("raw", "raw", "e2e_msg_per_s", "sqlite"),
    ("raw", "raw", "publish_single_msg_per_s", "sqlite"),
    ("pipeline", "pipeline", "log_off_msg_per_s", "-"),
    ("pipeline", "pipeline", "log_on_msg_per_s", "-"),
    ("faststream-sqla", "drain", "msg_per_s", "sqlite"),
    ("faststream-sqla", "drain", "over_paired_pipeline", "sqlite"),
    ("faststream-sqla", "drain", "access_log_over_paired_pipeline", "sqlite"),
    ("faststream-sqla", "publish", "single_msg_per_s", "sqlite"),
    ("faststream-sqla", "publish", "batch_msg_per_s", "sqlite"),
    ("faststream-sqla", "publish", "batch_over_paired_raw", "sqlite"),
    *(
        (system, scenario, metric, db)
        for db in ("sqlite", "postgresql", "mysql")
        for system, scenario, metric in (
            ("faststream-sqla", "drain", "msg_per_s"),
            ("faststream-sqla", "drain-batch", "msg_per_s"),
            ("faststream-sqla", "latency", "p50_ms"),
            ("faststream-sqla", "scale", "big_over_small"),
            ("faststream-sqla", "scale", "big_archive_over_small"),
            ("faststream-sqla", "scale", "one_timestamp_over_small"),
            ("faststream-sqla", "scale", "peak_rss_big_backlog_mib"),
            ("faststream-sqlbroker", "drain", "msg_per_s"),
            ("faststream-sqla", "drain", "over_paired_sqlbroker"),
            ("faststream-sqla", "admin", "queues_big_over_small"),
            ("faststream-sqla", "admin", "dead_letter_page_big_over_small"),
            ("faststream-sqla", "admin", "redrive_rows_per_s"),
            ("faststream-sqla", "admin", "prune_rows_per_s"),
        )
    ),
    ("faststream-sqla", "sustained", "vacuum_on_over_off", "postgresql"),
    ("faststream-sqla", "snapshot", "held_over_plain", "postgresql"),
    ("faststream-sqla", "snapshot", "held_vacuum_off_over_plain", "postgresql"),
    ("faststream-sqla", "processes", "workers_2_over_1", "postgresql"),
    ("faststream-sqla", "processes", "cpu_cap_2_over_1", "postgresql"),
    ("faststream-sqla", "processes", "workers_2_cpu_share", "postgresql"),
    ("faststream-sqla", "processes", "workers_2_over_1@claims=1000", "postgresql"),
    ("pgqueuer", "drain", "msg_per_s", "postgresql"),
    ("faststream-sqla", "drain-batch", "over_paired_pgqueuer", "postgresql"),
]
#: what the peers' own failures are reported as (a peer's publish can deadlock on
#: MariaDB under its own consumer): theirs to have, as long as their figures come out
PEERS = ("sqlbroker", "pgqueuer")


@pytest.mark.timeout(900)
def test_quick_benchmark_reports_positive_figures(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json", str(out),
         "--databases", ",".join(RUN_ON)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "x of pipeline" in proc.stdout  # the table was printed
    doc = json.loads(out.read_text())
    # a PostgreSQL-only scenario says it was skipped when the run leaves PostgreSQL out
    skipped_for_postgresql = "postgresql" not in RUN_ON
    ours = [
        e for e in doc["errors"]
        if not e["what"].startswith(PEERS)
        and not (e["what"] == "skipped" and skipped_for_postgresql)
    ]
    assert ours == []
    figures = {(f["system"], f["scenario"], f["metric"], f["database"]): f for f in doc["figures"]}
    for key in (k for k in EXPECTED if k[3] == "-" or k[3] in RUN_ON):
        assert key in figures, f"missing figure {key}"
        value = figures[key]["value"]
        assert isinstance(value, (int, float)) and value > 0, (key, value)

    if "sqlite" in RUN_ON:
        check_sqlite_figures(figures)

    # every scale ratio is paired with the small backlog's runs on either side, five times
    for db in RUN_ON:
        for metric in ("big_over_small", "big_archive_over_small", "one_timestamp_over_small"):
            details = figures[("faststream-sqla", "scale", metric, db)]["details"]
            assert len(details["pair_ratios"]) == 5

    if "postgresql" in RUN_ON:
        # each two-process run sits between one-process runs: 1, 2, 1, ..., 2, 1
        two_over_one = figures[
            ("faststream-sqla", "processes", "workers_2_over_1", "postgresql")
        ]
        assert len(two_over_one["details"]["pair_ratios"]) == 5
        runs = figures[("faststream-sqla", "processes", "workers_1_msg_per_s", "postgresql")]
        assert len(runs["details"]["runs"]) == 6

    if "sqlite" in RUN_ON:
        assert doc["settings"]["sqlite"]["journal_mode"] == "wal"
    assert doc["machine"]["cpu_model"]  # ratios move with the host: the run names it


def check_sqlite_figures(figures: dict) -> None:
    """The SQLite-only figures: the drain's claim sizes and ratios, the pairings."""
    drain = figures[("faststream-sqla", "drain", "msg_per_s", "sqlite")]
    assert set(drain["details"]["by_claims"]) == {"100-1000", "100", "500", "1000"}
    collections = drain["details"]["full_collections"]
    assert len(collections) == len(drain["details"]["repeat_runs"])
    assert all(isinstance(count, int) and count >= 0 for count in collections)
    assert drain["ratios"]["pipeline"] > 0
    assert drain["ratios"]["raw"] > 0
    paired = figures[("faststream-sqla", "drain", "over_paired_pipeline", "sqlite")]
    assert len(paired["details"]["pairs"]) == 1  # --quick: drain_pairs=1
    assert figures[("faststream-sqla", "publish", "batch_msg_per_s", "sqlite")]["ratios"]["raw"] > 0
    paired_publish = figures[("faststream-sqla", "publish", "batch_over_paired_raw", "sqlite")]
    assert len(paired_publish["details"]["pairs"]) == 3  # R B R B R B R

    # The batch drain runs with `drain`: a figure, or n/a while the feature is missing.
    batch = figures[("faststream-sqla", "drain-batch", "msg_per_s", "sqlite")]
    if batch["value"] is None:
        assert batch["details"]["status"] == "n/a"
    else:
        assert batch["value"] > 0



CHANNELS_TINY = [
    "--size", "200", "--channels", "20", "--keys", "10",
    "--hot", "300", "--small-channels", "5", "--small-size", "4",
    "--repeats", "1", "--scenarios", "many", "hot", "keys",
]


@pytest.mark.timeout(300)
def test_channel_benchmark_reports_its_scenarios(database_url: str, tmp_path: Path) -> None:
    # benchmarks.channels, tiny, on the test's own database (--url keeps its schema)
    out = tmp_path / "channels.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.channels", "--url", database_url,
         *CHANNELS_TINY, "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Many channels: 200 messages over 20 channels" in proc.stdout
    assert "Hot channel: 300 on \"hot\", then 5 channels of 4" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["errors"] == []
    ((database, found),) = doc["databases"].items()
    assert database in database_url.split("+")[0]
    many, hot = found["many"], found["hot"]
    for key in ("plain_msg_per_s", "channels_msg_per_s", "ratio"):
        assert isinstance(many[key], float) and many[key] > 0, (key, many[key])
    assert len(many["pair_ratios"]) == 1 and len(many["plain_runs_msg_per_s"]) == 2
    for kind in ("plain", "channels"):
        for key in ("small_done_s", "total_s"):
            assert hot[f"{kind}_{key}"] > 0, (kind, key)
    assert hot["small_done_ratio"] > 0 and hot["total_ratio"] > 0
    # Who came first is no timing: FIFO handles the small ones (published last) at the
    # end, the channels' turns well before the hot backlog is through.
    assert hot["plain_handled_by_then"] == 320
    assert hot["channels_handled_by_then"] < 300
    assert "Ordering keys beside channels of one: 200 messages over 10 ordering keys" in (
        proc.stdout
    )
    for kind in ("ordering_keys", "channels_of_one"):
        assert found["keys"][kind]["ratio"] > 0 and len(found["keys"][kind]["pair_ratios"]) == 1


def sqlite_benchmark_lines(module: str, *args: str, timeout: float) -> list[str]:
    """The output lines of `python -m <module> --databases sqlite <args>`, which must
    succeed. SQLite only: its file is the script's own, so no other test's database is
    touched."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--databases", "sqlite", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.splitlines()


def test_claim_phase_benchmark_reports_both_phases() -> None:
    (line,) = sqlite_benchmark_lines(
        "benchmarks.claim_phases", "--messages", "300", "--claim", "100", "--rounds", "1",
        timeout=120,
    )  # fmt: skip
    claim = float(line.split("claim")[1].split("µs")[0])
    write = float(line.split("outcome write")[1].split("µs")[0])
    assert claim > 0 and write > 0, line


@pytest.mark.timeout(600)
def test_instruction_count_benchmark_reports_a_count_a_message() -> None:
    # tiny sizes, since everything runs under valgrind
    (line,) = sqlite_benchmark_lines(
        "benchmarks.instructions", "--small", "20", "--large", "60", timeout=600
    )
    assert line.startswith("drain on sqlite: "), line
    assert float(line.split(": ")[1].split(" ")[0].replace(",", "")) > 0, line


def test_database_work_benchmark_counts_sqlite_instructions_by_statement() -> None:
    first, *statements = sqlite_benchmark_lines(
        "benchmarks.database_work", "--messages", "300", timeout=120
    )
    assert first.startswith("working tree, sqlite: "), first
    assert float(first.split(": ")[1].split(" ")[0].replace(",", "")) > 0, first
    # the claim's UPDATE and the outcomes' archive copy are among the statements counted
    assert any("UPDATE message SET state" in line for line in statements), statements
    assert any("INSERT INTO message_archive" in line for line in statements), statements


def test_the_collector_watch_counts_full_collections_inside_its_block_only() -> None:
    import gc

    from benchmarks.common import watched_collector

    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection inside the block: only the two asked for
    try:
        with watched_collector() as activity:
            gc.collect()
            gc.collect(0)
        gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert activity.full_collections == 1
    assert activity.collections[0] == 1
    assert activity.seconds[2] > 0
