"""`faststream run` on an app that cannot start for a reason we check on purpose (schema
missing or outdated, database unreachable, bad URL, missing driver, invalid option) prints
the error in one or two lines naming the fix, exits non-zero and creates nothing on disk;
a bug in the app still shows its traceback. Each case is a real `faststream run` process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import upgrade_schema
from faststream_sqla.migrations import downgrade_schema, version_table_for
from faststream_sqla.schema import TableNames

from tests.conftest import on_servers

BIN = Path(sys.executable).parent
#: a guard against a process that never ends, not a synchronisation
EXIT_TIMEOUT = 120
#: FastStream's own line before the broker starts; the error follows it
STARTING = "FastStream app starting..."

#: the tables the outdated-schema test migrates to an old revision, and drops after
NAMES = {"message": "old_msg", "archive": "old_msg_archive"}

APP = """
import os
from faststream import FastStream
from faststream_sqla import SqlaBroker

broker = SqlaBroker(os.environ["APP_URL"], message_table=os.environ.get("APP_TABLE", "message"),
                    archive_table=os.environ.get("APP_ARCHIVE", "message_archive"))
app = FastStream(broker)

@broker.subscriber("orders", max_workers=int(os.environ.get("APP_WORKERS", "1")))
async def handle(body: dict) -> None: ...

if cron := os.environ.get("APP_CRON"):
    broker.schedule("reports", {}, cron=cron)

if os.environ.get("APP_BUG"):
    @app.on_startup
    async def broken() -> None:
        {}["a bug in the app"]
"""


async def faststream_run(tmp_path: Path, url: str, **env: str) -> tuple[int, list[str], str]:
    """Run the app under `faststream run` in `tmp_path`: exit code, the lines it printed
    other than FastStream's start line, and everything it printed."""
    (tmp_path / "startup_app.py").write_text(APP)
    done = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / "faststream"), "run", "startup_app:app"],
        cwd=tmp_path,
        env={**os.environ, "APP_URL": url, **env},
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if line.strip() and STARTING not in line]
    return done.returncode, lines, output


def assert_short(code: int, lines: list[str], output: str, *, names: str) -> None:
    assert code != 0, output
    assert "Traceback" not in output, output
    assert 1 <= len(lines) <= 2, output
    assert names in lines[-1], output


async def test_a_missing_schema_is_one_line_naming_the_upgrade_command(database_url, tmp_path):
    # tables under names never migrated: the database is there, the schema is not
    code, lines, output = await faststream_run(
        tmp_path, database_url, APP_TABLE="never_made", APP_ARCHIVE="never_made_archive"
    )
    assert_short(code, lines, output, names="faststream-sqla db upgrade --url")
    assert lines[-1].startswith("SchemaMissingError: ")
    assert "--message-table never_made" in lines[-1]


async def test_an_outdated_schema_is_one_line_naming_the_upgrade_command(database_url, tmp_path):
    names = {"message_table": NAMES["message"], "archive_table": NAMES["archive"]}
    await upgrade_schema(database_url, revision="0001", **names)
    try:
        code, lines, output = await faststream_run(
            tmp_path, database_url, APP_TABLE="old_msg", APP_ARCHIVE="old_msg_archive"
        )
    finally:
        await downgrade_schema(database_url, **names)
        # base leaves Alembic's version table of these names behind: the database is shared
        engine = create_async_engine(database_url)
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(f"DROP TABLE IF EXISTS {version_table_for(TableNames(**NAMES))}")
            )
        await engine.dispose()
    assert_short(code, lines, output, names="faststream-sqla db upgrade --url")
    assert lines[-1].startswith("SchemaOutdatedError: ")


async def test_a_missing_sqlite_file_is_named_and_not_created(tmp_path):
    code, lines, output = await faststream_run(tmp_path, "sqlite+aiosqlite:///app.db")
    assert_short(
        code, lines, output, names="faststream-sqla db upgrade --url sqlite+aiosqlite:///app.db"
    )
    assert "no SQLite database at" in lines[-1]
    assert not (tmp_path / "app.db").exists()
    assert not list(tmp_path.glob("app.db*"))  # no journal or WAL file either


@pytest.mark.parametrize("server", on_servers())
async def test_an_unreachable_database_is_one_line_with_the_password_masked(server, tmp_path):
    url = {
        "postgresql": "postgresql+asyncpg://postgres:s3cret@127.0.0.1:1/nowhere",
        "mysql": "mysql+asyncmy://root:s3cret@127.0.0.1:1/nowhere",
    }[server]
    code, lines, output = await faststream_run(tmp_path, url)
    assert_short(code, lines, output, names="cannot reach the database at")
    assert lines[-1].startswith("DatabaseUnreachableError: ")
    assert "s3cret" not in output and ":***@127.0.0.1:1" in lines[-1]


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("postgresql://postgres:s3cret@127.0.0.1/app", "postgresql+asyncpg://postgres:***@"),
        ("mysql://root@127.0.0.1/app", "mysql+asyncmy://root@127.0.0.1/app"),
        ("sqlite:///app.db", "sqlite+aiosqlite:///app.db"),
        ("not a url", "not a database URL"),
    ],
)
async def test_a_url_without_an_async_driver_is_one_line_naming_the_url_to_use(
    url, advice, tmp_path
):
    code, lines, output = await faststream_run(tmp_path, url)
    assert_short(code, lines, output, names=advice)
    assert lines[-1].startswith("InvalidOptionError: ")
    assert "s3cret" not in output
    assert not (tmp_path / "app.db").exists()


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"APP_WORKERS": "0"}, "max_workers must be an integer from 1"),
        ({"APP_CRON": "61 * * * *"}, "is not a valid cron expression"),
    ],
)
async def test_an_invalid_option_is_one_line_naming_it(env, names, tmp_path):
    code, lines, output = await faststream_run(tmp_path, "sqlite+aiosqlite:///app.db", **env)
    assert_short(code, lines, output, names=names)
    assert lines[-1].startswith("InvalidOptionError: ")
    assert not (tmp_path / "app.db").exists()


async def test_a_bug_in_the_app_still_shows_its_traceback(database_url, tmp_path):
    code, _, output = await faststream_run(tmp_path, database_url, APP_BUG="1")
    assert code != 0
    assert "Traceback" in output and "KeyError" in output and "a bug in the app" in output
