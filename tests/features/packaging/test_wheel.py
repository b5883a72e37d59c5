"""The built wheel carries the migrations, and they run from there."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faststream_sqla.migrations import HEAD_REVISION

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_wheel_ships_migrations_that_upgrade_a_database(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("faststream_sqla-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    assert "faststream_sqla/_alembic/env.py" in names
    assert "faststream_sqla/_alembic/versions/0001_initial.py" in names
    for database in ("postgresql", "mysql", "sqlite"):
        assert f"faststream_sqla/drivers/{database}/queries.sql" in names
    # the dashboard's pages work offline: templates and every static file ship
    for shipped in (
        "templates/base.html",
        "templates/overview.html",
        "static/htmx.min.js",
        "static/htmx.LICENSE.txt",
        "static/dashboard.js",
        "static/dashboard.css",
    ):
        assert f"faststream_sqla/dashboard/{shipped}" in names

    # Run from the unpacked wheel, away from the source tree.
    script = (
        "import asyncio, sys\n"
        "from faststream_sqla.migrations import script_location, upgrade_schema, current_revision\n"
        "print(script_location())\n"
        "url = sys.argv[1]\n"
        "asyncio.run(upgrade_schema(url))\n"
        "print(asyncio.run(current_revision(url)))\n"
        "from faststream_sqla.drivers.catalogue import load_catalogue\n"
        "print(len(load_catalogue('faststream_sqla.drivers.sqlite').queries))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, f"sqlite+aiosqlite:///{tmp_path / 'q.db'}"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == str(tmp_path / "site" / "faststream_sqla" / "_alembic")
    assert out[1] == HEAD_REVISION  # the newest script shipped, whatever its number
    assert int(out[2]) > 0  # the SQL catalogue is read from the installed package
