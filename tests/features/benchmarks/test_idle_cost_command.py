"""The idle-cost benchmark runs end to end at a tiny size on the databases the run
keeps (no timing thresholds: the figures only have to exist)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DIALECTS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
#: the databases it measures by default, as far as FSQLA_DIALECTS keeps them
RUN_ON = [db for db in ("sqlite", "mysql") if db in DIALECTS]


@pytest.mark.timeout(300)
def test_idle_cost_reports_every_window(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.idle_cost", "--databases", ",".join(RUN_ON),
         "--processes", "2", "--seconds", "1", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    windows = {(w["database"], w["mode"]): w for w in json.loads(out.read_text())["windows"]}
    expected = {("sqlite", "off"), ("sqlite", "on"), ("mysql", "none"), ("mysql", "off"),
                ("mysql", "on")}  # fmt: skip
    assert set(windows) == {key for key in expected if key[0] in RUN_ON}
    for (database, mode), window in windows.items():
        assert window["processes"] == (0 if mode == "none" else 2)
        assert window["subscribers_cpu_s"] >= 0
        if database == "mysql":
            assert window["server_cpu_s"] >= 0
            assert window["statements"] >= 0
    for database in RUN_ON:
        # the watcher looked, and nothing looks without it
        assert windows[(database, "on")]["looks"] > 0
        assert windows[(database, "off")]["looks"] == 0
