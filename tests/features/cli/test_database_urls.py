"""Bad database URLs, from Python and from the shell: one typed error that says what to do,
not a driver's traceback; read-only commands refuse a SQLite file that is not there, and
`db upgrade` still creates one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from faststream_sqla import DatabaseUnreachableError, SqlaBroker, upgrade_schema
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.cli import invoke as cli
from tests.support.helpers import threads_finish_before_the_loop_closes


# -- bad URLs: one typed error, not a driver's traceback ------------------------------------
def bad_urls(database_url: str, dialect_name: str, tmp_path: Path) -> dict[str, str]:
    url = sa.make_url(database_url)
    if dialect_name == "sqlite":
        return {"missing directory": f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/q.db"}
    return {
        "no server": url.set(port=1).render_as_string(hide_password=False),
        "wrong password": url.set(password="WrOnG-SeCrEt", username="nobody_here").render_as_string(
            hide_password=False
        ),
        "missing database": url.set(database="fsqla_no_such_database").render_as_string(
            hide_password=False
        ),
    }


async def test_upgrade_schema_on_a_bad_url_is_the_unreachable_error(
    database_url, dialect_name, tmp_path
):
    for problem, url in bad_urls(database_url, dialect_name, tmp_path).items():
        async with threads_finish_before_the_loop_closes():
            with pytest.raises(DatabaseUnreachableError, match="cannot reach the database") as info:
                await upgrade_schema(url)
            assert "WrOnG-SeCrEt" not in str(info.value), problem
            # the same words as the broker's start
            with pytest.raises(DatabaseUnreachableError, match="cannot reach the database"):
                await SqlaBroker(url).start()


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("postgresql://app:SeCrEt@db/app", "postgresql+asyncpg://app:***@db/app"),
        ("postgresql+psycopg2://app@db/app", "postgresql+asyncpg://app@db/app"),
        ("mysql://root@db/app", "mysql+asyncmy://root@db/app"),
        ("sqlite:///app.db", "sqlite+aiosqlite:///app.db"),
    ],
)
async def test_a_sync_url_gets_the_async_driver_to_use(url, advice, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["db", "upgrade"], ["db", "current"], ["queues"], ["publish", "q", "x"]):
        result = await cli(*command, "--url", url, code=1)
        assert f"use the async driver: {advice}" in result.output, command
        assert "SeCrEt" not in result.output
    with pytest.raises(InvalidOptionError, match=re.escape(f"use the async driver: {advice}")):
        await SqlaBroker(url).start()


# -- read-only commands on a SQLite file that is not there ----------------------------------
@pytest.mark.parametrize(
    "command",
    [["db", "current"], ["queues"], ["inspect", "1"], ["dlq", "list"], ["dlq", "summary"],
     ["publish", "q", "x"], ["purge", "q", "--yes"]],
    ids=" ".join,
)
async def test_commands_refuse_a_sqlite_file_that_does_not_exist(command, tmp_path):
    typo = tmp_path / "typo.db"
    result = await cli(*command, "--url", f"sqlite+aiosqlite:///{typo}", code=1)
    assert f"no SQLite database at {typo}" in result.output
    assert "faststream-sqla db upgrade" in result.output
    assert not typo.exists()


async def test_db_upgrade_still_creates_a_sqlite_file(tmp_path):
    fresh = tmp_path / "fresh.db"
    await cli("db", "upgrade", "--url", f"sqlite+aiosqlite:///{fresh}")
    assert fresh.exists()
    result = await cli("db", "current", "--url", f"sqlite+aiosqlite:///{fresh}")
    assert "(head)" in result.output
