"""Publishing from a shell, on every database: `faststream-sqla publish` (bodies, headers,
delivery options, bad input) and FastStream's own `faststream publish`, whose delays and
time-to-lives arrive as text."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from faststream_sqla import SqlaBroker, SqlaMessage
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.cli import invoke as cli
from tests.support.helpers import FAST, Recorder, rows

BIN = Path(sys.executable).parent


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
