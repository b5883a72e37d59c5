"""The benchmark command runs end to end at its tiny size on SQLite (no timing thresholds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

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
]


@pytest.mark.timeout(300)
def test_quick_benchmark_reports_positive_figures(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.run", "--quick", "--databases", "sqlite",
            "--scenarios", "raw,pipeline,drain,publish", "--json", str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "x of pipeline" in proc.stdout  # the table was printed
    doc = json.loads(out.read_text())
    assert doc["errors"] == []
    figures = {(f["system"], f["scenario"], f["metric"], f["database"]): f for f in doc["figures"]}
    for key in EXPECTED:
        assert key in figures, f"missing figure {key}"
        value = figures[key]["value"]
        assert isinstance(value, (int, float)) and value > 0, (key, value)

    drain = figures[("faststream-sqla", "drain", "msg_per_s", "sqlite")]
    assert set(drain["details"]["by_claims"]) == {"100-1000", "100", "500", "1000"}
    assert drain["ratios"]["pipeline"] > 0
    assert drain["ratios"]["raw"] > 0
    paired = figures[("faststream-sqla", "drain", "over_paired_pipeline", "sqlite")]
    assert len(paired["details"]["pairs"]) == 1  # --quick: one repeat
    assert figures[("faststream-sqla", "publish", "batch_msg_per_s", "sqlite")]["ratios"]["raw"] > 0
    paired_publish = figures[("faststream-sqla", "publish", "batch_over_paired_raw", "sqlite")]
    assert len(paired_publish["details"]["pairs"]) == 3  # R B R B R B R

    # The batch drain runs with `drain`: a figure, or n/a while the feature is missing.
    batch = figures[("faststream-sqla", "drain-batch", "msg_per_s", "sqlite")]
    if batch["value"] is None:
        assert batch["details"]["status"] == "n/a"
    else:
        assert batch["value"] > 0

    assert doc["settings"]["sqlite"]["journal_mode"] == "wal"
    assert doc["machine"]["cpu_model"]  # ratios move with the host: the run names it
