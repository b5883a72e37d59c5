"""A URL whose async driver is not installed names the extra that installs it, from
`faststream-sqla` and under `faststream run`. Each case is a real process in which the
driver cannot be imported (a None in `sys.modules`, as Python documents for blocking an
import), since the test environment has every driver installed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: a guard against a process that never ends, not a synchronisation
EXIT_TIMEOUT = 120

DRIVERS = [
    pytest.param(
        "asyncpg", "postgresql+asyncpg://app:s3cret@127.0.0.1/app", "postgres", id="asyncpg"
    ),
    pytest.param("asyncmy", "mysql+asyncmy://app:s3cret@127.0.0.1/app", "mysql", id="asyncmy"),
]


async def without(
    driver: str, argv0: str, main: str, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run `main` (an import and a call) with `sys.argv` = [argv0, *args], `driver` blocked."""
    code = (
        f"import sys; sys.modules[{driver!r}] = None; sys.argv = [{argv0!r}, *sys.argv[1:]]; "
        + main
    )
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )


async def db_upgrade_output(driver: str, url: str, tmp_path) -> str:
    """What `faststream-sqla db upgrade --url URL` prints without `driver`; it must fail
    with exit code 1."""
    done = await without(
        driver,
        "faststream-sqla",
        "from faststream_sqla.cli import app; app()",
        "db",
        "upgrade",
        "--url",
        url,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize(("driver", "url", "extra"), DRIVERS)
async def test_db_upgrade_without_the_driver_names_the_extra_to_install(
    driver, url, extra, tmp_path
):
    output = await db_upgrade_output(driver, url, tmp_path)
    assert f'pip install "faststream-sqla[{extra}]"' in output
    assert f"the {driver} driver of" in output and "is not installed" in output
    assert "use the async driver" not in output  # the URL given is the right one
    assert "s3cret" not in output and "Traceback" not in output


@pytest.mark.parametrize(("driver", "url", "extra"), DRIVERS)
async def test_a_sync_url_without_the_async_driver_names_both_the_url_and_the_extra(
    driver, url, extra, tmp_path
):
    sync_url = url.replace(f"+{driver}", "")
    output = await db_upgrade_output(driver, sync_url, tmp_path)
    assert f"use the async driver: {url.replace('s3cret', '***')}" in output
    assert f'after installing it: pip install "faststream-sqla[{extra}]"' in output


@pytest.mark.parametrize(("driver", "url", "extra"), DRIVERS)
async def test_faststream_run_without_the_driver_is_one_line_naming_the_extra(
    driver, url, extra, tmp_path
):
    (tmp_path / "driverless.py").write_text(
        "from faststream import FastStream\n"
        "from faststream_sqla import SqlaBroker\n"
        f"app = FastStream(SqlaBroker({url!r}))\n"
    )
    done = await without(
        driver,
        "faststream",
        "from faststream.__main__ import cli; cli()",
        "run",
        "driverless:app",
        cwd=tmp_path,
    )
    assert done.returncode != 0
    lines = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and "FastStream app starting" not in line
    ]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("InvalidOptionError: the ")
    assert lines[0].endswith(f'pip install "faststream-sqla[{extra}]"')
    assert "s3cret" not in done.stderr
