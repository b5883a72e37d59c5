"""What a newcomer meets in the first hour (issue 24), on every database: publishing
from a shell (`faststream-sqla publish`, FastStream's `faststream publish`), bad URLs,
a batch given as one list, and the broker options FastStream's other brokers take."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from faststream import BaseMiddleware
from faststream_sqla import (
    DatabaseUnreachableError,
    Envelope,
    SqlaBroker,
    SqlaMessage,
    upgrade_schema,
)
from faststream_sqla.cli import app
from faststream_sqla.exceptions import InvalidOptionError

from .helpers import FAST, Recorder, rows

BIN = Path(sys.executable).parent


async def cli(*args: str, code: int = 0) -> Any:
    # in a thread: the command runs its own event loop, as from a shell
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def delay_of(row: Any) -> timedelta:
    return row["next_attempt_at"] - row["created_at"]


# -- faststream-sqla publish ---------------------------------------------------------------
async def test_cli_publish_stores_json_or_text_with_headers_and_delay(
    database_url, engine, tables
):
    done = await cli("publish", "orders", '{"id": 1}', "--url", database_url,
                     "--header", "tenant=acme", "--header", "trace=a=b", "--delay", "1m")
    assert "Published message" in done.output
    text = json.loads((await cli("publish", "orders", "hello there", "--url", database_url,
                                 "--json")).stdout)
    first, second = await rows(engine, tables.message)
    assert done.output.split()[2] == str(first["id"]) and text == {
        "id": second["id"], "queue": "orders", "content_type": "text/plain"
    }
    assert json.loads(first["payload"]) == {"id": 1}
    assert first["headers"]["tenant"] == "acme" and first["headers"]["trace"] == "a=b"
    assert first["headers"]["content-type"] == "application/json"
    assert timedelta(seconds=59) <= delay_of(first) <= timedelta(seconds=61)
    assert second["payload"] == b"hello there"
    assert second["headers"]["content-type"] == "text/plain"
    assert delay_of(second) <= timedelta(seconds=1)


async def test_a_message_published_from_the_cli_reaches_a_handler(database_url):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("orders", **FAST)
    async def handle(body: dict, msg: SqlaMessage) -> None:
        got.record((body, msg.headers.get("tenant")))

    async with broker:
        await broker.start()
        await cli("publish", "orders", '{"id": 7}', "--header", "tenant=acme",
                  "--url", database_url)
        assert await got.wait_for(1) == [({"id": 7}, "acme")]


async def test_cli_publish_takes_the_delivery_options(database_url, engine, tables):
    options = ["--channel", "acme", "--priority", "7", "--ordering-key", "order-9",
               "--idempotency-key", "once", "--ttl", "1h"]
    first = json.loads((await cli("publish", "orders", "a", "--url", database_url,
                                  *options, "--json")).stdout)
    again = json.loads((await cli("publish", "orders", "a", "--url", database_url,
                                  *options, "--json")).stdout)
    assert again == first  # the idempotency key: the second publish wrote nothing
    (row,) = await rows(engine, tables.message)
    assert (row["channel"], row["priority"], row["ordering_key"], row["idempotency_key"]) == (
        "acme", 7, "order-9", "once"
    )
    lives = row["expires_at"] - row["created_at"]
    assert timedelta(minutes=59) <= lives <= timedelta(minutes=61)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--delay", "soon"], "--delay must be seconds"),
        (["--ttl", "-5"], "ttl"),
        (["--header", "no-equals-sign"], "is not NAME=VALUE"),
        (["--priority", "11"], "priority must be from 0 to 10"),
        (["--channel", ""], "channel must be 1 to"),
        (["--ordering-key", "x" * 300], "ordering_key must be 1 to"),
    ],
)
async def test_cli_publish_bad_input_is_a_usage_error_and_writes_nothing(
    database_url, engine, tables, args, expected
):
    result = await cli("publish", "q", "x", "--url", database_url, *args, code=2)
    assert expected in result.output
    assert await rows(engine, tables.message) == []


# -- FastStream's own CLI: `faststream publish ... --delay 5` --------------------------------
async def test_faststream_publish_passes_a_delay_as_a_string(database_url, engine, tables, tmp_path):
    (tmp_path / "shop.py").write_text(
        "from faststream import FastStream\n"
        "from faststream_sqla import SqlaBroker\n"
        f"app = FastStream(SqlaBroker({database_url!r}))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / "faststream"), "publish", "shop:app", '{"id": 1}', "--queue", "orders",
         "--delay", "30", "--priority", "3"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = await rows(engine, tables.message)
    assert (row["queue"], json.loads(row["payload"]), row["priority"]) == ("orders", {"id": 1}, 3)
    assert timedelta(seconds=29) <= delay_of(row) <= timedelta(seconds=31)


async def test_publish_reads_delays_and_ttls_written_as_text(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("a", queue="q", delay="2m")
        await broker.publish("b", queue="q", delay="90", ttl="1h")
        with pytest.raises(InvalidOptionError, match="delay must be seconds .* got 'soon'"):
            await broker.publish("c", queue="q", delay="soon")
        with pytest.raises(InvalidOptionError, match="ttl"):
            await broker.publish("d", queue="q", ttl="-5")
    a, b = await rows(engine, tables.message)
    assert timedelta(seconds=119) <= delay_of(a) <= timedelta(seconds=121)
    assert timedelta(seconds=89) <= delay_of(b) <= timedelta(seconds=91)
    assert b["expires_at"] is not None


# -- publish_batch([a, b]) -------------------------------------------------------------------
async def test_a_batch_given_as_one_list_is_refused_before_anything_is_written(
    database_url, engine, tables
):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match=r"publish_batch\(\*items, queue=\.\.\.\)"):
            await broker.publish_batch(["a", "b"], queue="q")
        with pytest.raises(InvalidOptionError, match="one tuple of 2 items"):
            await broker.publisher("q").publish_batch(("a", "b"))
        assert len(await broker.publish_batch(*["a", "b"], queue="q")) == 2
        await broker.publish(["a", "b"], queue="q")  # one message whose body is a list
    a, b, listed = await rows(engine, tables.message)
    assert (a["payload"], b["payload"], json.loads(listed["payload"])) == (b"a", b"b", ["a", "b"])


# -- a publish middleware replacing cmd.batch_bodies (FastStream's batch API) ----------------
class Shout(BaseMiddleware):
    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        cmd.batch_bodies = tuple(body.upper() for body in cmd.batch_bodies)
        return await call_next(cmd)


class DropFirst(BaseMiddleware):
    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        cmd.batch_bodies = cmd.batch_bodies[1:]
        return await call_next(cmd)


async def test_a_middleware_replaces_batch_bodies_and_envelopes_keep_their_options(
    database_url, engine, tables
):
    async with SqlaBroker(database_url, middlewares=(Shout,)) as broker:
        await broker.connect()
        await broker.publish_batch(
            "a", Envelope("b", priority=7, headers={"k": "v"}), queue="q"
        )
    a, b = await rows(engine, tables.message)
    assert (a["payload"], a["priority"]) == (b"A", 0)
    assert (b["payload"], b["priority"], b["headers"]["k"]) == (b"B", 7, "v")


async def test_a_middleware_that_drops_an_enveloped_item_is_refused_whole(
    database_url, engine, tables
):
    async with SqlaBroker(database_url, middlewares=(DropFirst,)) as broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match="one for one"):
            await broker.publish_batch("a", Envelope("b", priority=7), queue="q")
        assert len(await broker.publish_batch("a", "b", "c", queue="q")) == 2
    assert [r["payload"] for r in await rows(engine, tables.message)] == [b"b", b"c"]


# -- id_generator=, as FastStream's other brokers take it -----------------------------------
async def test_id_generator_makes_the_correlation_ids(database_url, engine, tables):
    made = iter(f"order-{n}" for n in range(100))
    broker = SqlaBroker(database_url, id_generator=lambda: next(made))
    got = Recorder()

    @broker.subscriber("q", **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.correlation_id))

    async with broker:
        await broker.start()
        await broker.publish("one", queue="q")
        await broker.publisher("q").publish("two")
        await broker.publish_batch("three", "four", queue="q")
        await broker.publish("mine", queue="q", correlation_id="given")
        handled = dict(await got.wait_for(5))
    assert handled == {
        "one": "order-0", "two": "order-1", "three": "order-2-0", "four": "order-2-1",
        "mine": "given",
    }
    with pytest.raises(InvalidOptionError, match="id_generator"):
        SqlaBroker(database_url, id_generator="uuid")  # type: ignore[arg-type]


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
