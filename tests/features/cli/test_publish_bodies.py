"""`faststream-sqla publish` bodies: JSON when it parses, text otherwise, but text that
opens like JSON and does not parse is refused (exit 2, nothing written) unless `--text`
says it is text; the content type stored is printed; on every database."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from faststream_sqla.cli import app

from tests.support.helpers import rows


async def publish(database_url: str, *args: str) -> Any:
    # in a thread: the command runs its own event loop, as from a shell
    return await asyncio.to_thread(
        CliRunner().invoke, app, ["publish", "orders", *args, "--url", database_url]
    )


@pytest.mark.parametrize("body", ["{id: 1}", "[1, 2", '"unterminated', "  {'id': 1}"])
async def test_text_that_looks_like_json_but_does_not_parse_is_refused(
    body, database_url, engine, tables
):
    result = await publish(database_url, body)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "looks like JSON but does not parse" in lines[0]
    assert "--text" in lines[0] and "Traceback" not in result.output
    assert await rows(engine, tables.message) == []


async def test_text_flag_stores_any_body_as_text(database_url, engine, tables):
    malformed = await publish(database_url, "{id: 1}", "--text")
    valid = await publish(database_url, '{"id": 1}', "--text", "--json")
    assert malformed.exit_code == 0 and valid.exit_code == 0, malformed.output + valid.output
    assert malformed.output.strip().endswith("to orders (text/plain).")
    assert json.loads(valid.stdout)["content_type"] == "text/plain"
    first, second = await rows(engine, tables.message)
    assert (first["payload"], first["headers"]["content-type"]) == (b"{id: 1}", "text/plain")
    assert (second["payload"], second["headers"]["content-type"]) == (b'{"id": 1}', "text/plain")


@pytest.mark.parametrize(
    ("body", "header", "shown"),
    [
        ('{"id": 1}', None, "application/json"),
        ("42", None, "application/json"),
        ("hello there", None, "text/plain"),
        ("<order id='1'/>", "content-type=application/xml", "application/xml"),
    ],
)
async def test_the_content_type_stored_is_printed(
    body, header, shown, database_url, engine, tables
):
    extra = ["--header", header] if header else []
    result = await publish(database_url, body, *extra)
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(f"to orders ({shown}).")
    (row,) = await rows(engine, tables.message)
    assert row["headers"]["content-type"] == shown
