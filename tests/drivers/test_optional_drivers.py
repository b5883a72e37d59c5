"""A SQLite-only install (no asyncpg, no asyncmy) imports the broker, the admin API and
the CLI: the PostgreSQL and MySQL modules load only for their own databases."""

from __future__ import annotations

import subprocess
import sys

# None in sys.modules makes `import asyncpg` raise ImportError, as if not installed
SCRIPT = """
import sys
sys.modules["asyncpg"] = None
sys.modules["asyncmy"] = None
import faststream_sqla
import faststream_sqla.admin
import faststream_sqla.admin.api
import faststream_sqla.cli
from faststream_sqla import SqlaBroker
broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
print("imported")
"""


def test_the_broker_admin_api_and_cli_import_without_the_server_drivers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"
