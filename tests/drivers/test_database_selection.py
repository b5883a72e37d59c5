"""FSQLA_DIALECTS picks the databases the suite runs on (tests/conftest.py): tests of the
others are not collected, and a configured server that does not answer ends the session
with one message that names the setting to change. Each case runs pytest itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: server-bound tests of every kind: parametrised per server, marked, or by dialect_name
TARGET = "tests/drivers/test_conformance.py"


def pytest_run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "FSQLA_"))}
    clean["FSQLA_DB_PREFIX"] = os.environ.get("FSQLA_DB_PREFIX", "fsqla") + "_selection"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *args],
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=300,
    )


def test_sqlite_only_collects_no_server_test() -> None:
    done = pytest_run(TARGET, "--collect-only", "-q", FSQLA_DIALECTS="sqlite")
    assert done.returncode == 0, done.stdout + done.stderr
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected
    assert not [t for t in collected if "postgresql" in t or "mysql" in t]
    assert "deselected" in done.stdout


def test_sqlite_only_runs_without_any_server() -> None:
    # Servers that cannot answer: a SQLite-only run must not try them.
    done = pytest_run(
        TARGET, "-q", FSQLA_DIALECTS="sqlite",
        FSQLA_PG_URL="postgresql+asyncpg://postgres@127.0.0.1:1",
        FSQLA_MYSQL_URL="mysql+asyncmy://root@127.0.0.1:1",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "error" not in done.stdout.lower()


def test_an_unreachable_server_ends_the_session_with_one_message() -> None:
    done = pytest_run(
        TARGET, "-q", FSQLA_DIALECTS="sqlite,postgresql",
        FSQLA_PG_URL="postgresql+asyncpg://postgres:SeCrEt@127.0.0.1:1",
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "PostgreSQL at postgresql+asyncpg://postgres:***@127.0.0.1:1 does not answer" in output
    assert "FSQLA_PG_URL" in output and "FSQLA_DIALECTS=sqlite" in output
    assert "SeCrEt" not in output
    assert not re.search(r"\d+ (passed|failed|error)", output), output  # nothing ran
