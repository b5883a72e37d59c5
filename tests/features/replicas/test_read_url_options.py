"""`read_url` on every database: a replica of another kind of database is refused when
the admin is made, before anything is read or written; a read_url naming the primary
itself reads as usual and reports it 0 behind (SQLite: it cannot tell)."""

from __future__ import annotations

import pytest

from faststream_sqla import ReplicaMismatchError
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.dashboard import create_app
from faststream_sqla.prometheus import QueueStateCollector
from tests.support.cli import cli, invoke

#: a URL of another kind of database than each test database, never connected to
OTHER_KIND = {
    "sqlite": "postgresql+asyncpg://postgres@127.0.0.1:1/none",
    "postgresql": "mysql+asyncmy://root@127.0.0.1:1/none",
    "mysql": "sqlite+aiosqlite:///never-created.db",
}


def test_a_read_url_of_another_kind_of_database_is_refused_when_the_admin_is_made(
    database_url, dialect_name
):
    other = OTHER_KIND[dialect_name]
    with pytest.raises(ReplicaMismatchError, match="same kind of database"):
        QueueAdmin(database_url, read_url=other)
    with pytest.raises(ReplicaMismatchError):
        create_app(database_url, read_url=other)
    with pytest.raises(ReplicaMismatchError):
        QueueStateCollector(database_url, read_url=other)


async def test_the_cli_refuses_a_read_url_of_another_kind_in_one_line(database_url, dialect_name):
    result = await cli(database_url, "queues", "--read-url", OTHER_KIND[dialect_name], code=2)
    assert "same kind of database" in result.output
    assert len(result.output.strip().splitlines()) <= 2


async def test_a_read_url_naming_the_primary_reads_as_usual_and_reports_no_delay(
    make_broker, database_url, dialect_name
):
    broker = make_broker(logger=None)
    async with broker:
        await broker.connect()
        await broker.publish_batch("a", "b", queue="own")
    async with QueueAdmin(database_url, read_url=database_url) as admin:
        (stats,) = await admin.queues(["own"])
        assert stats.ready.value == 2
        lag = await admin.replica_lag()
    assert lag is not None
    # SQLite has no replicas, so it cannot tell; a server that replicates nothing is
    # its own primary
    assert lag.seconds == (None if dialect_name == "sqlite" else 0.0)
    if lag.seconds is None:
        assert str(lag) == "read from replica, lag unknown (is its replication running?)"


async def test_an_admin_without_read_url_reads_the_primary_and_reports_no_replica(database_url):
    async with QueueAdmin(database_url) as admin:
        assert not admin.reads_from_replica
        assert await admin.replica_lag() is None



@pytest.mark.parametrize("dialect_name", ["sqlite"])  # a SQLite file: only SQLite has one
async def test_the_cli_refuses_a_read_url_naming_a_sqlite_file_that_does_not_exist(
    database_url, tmp_path
):
    missing = tmp_path / "replica.db"
    result = await cli(
        database_url, "queues", "--read-url", f"sqlite+aiosqlite:///{missing}", code=2
    )
    assert "no SQLite database at" in result.output
    assert not missing.exists()  # connecting would have made an empty one


READ_COMMANDS = [
    "queues", "messages", "inspect", "workers", "dlq list", "dlq summary", "queue paused",
    "breaker status", "channel list", "schedule list", "topic list", "topic route", "dashboard",
]
CHANGE_COMMANDS = [
    "purge", "replay", "dlq redrive", "queue pause", "queue resume", "queue limit",
    "breaker reset", "channel set", "channel pause", "schedule pause", "schedule delete",
    "topic bind", "topic unbind", "archive prune", "archive partition", "archive maintain",
]


@pytest.mark.parametrize("command", READ_COMMANDS + CHANGE_COMMANDS)
async def test_the_commands_that_only_read_take_a_read_url_and_the_others_do_not(command):
    result = await invoke(*command.split(), "--help")
    assert ("--read-url" in result.output) == (command in READ_COMMANDS), result.output
