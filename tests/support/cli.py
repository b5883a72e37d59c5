"""The `faststream-sqla` commands run in-process (CliRunner), as the operations tests run them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

from faststream_sqla.cli import app


async def invoke(*args: str, code: int = 0, input: str | None = None) -> Any:
    """`faststream-sqla <args>`, checked to exit with `code` and print no traceback."""
    # in a thread: the command runs its own event loop, as from a shell
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), input)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


async def cli(url: str, *args: str, code: int = 0, input: str | None = None) -> Any:
    """`faststream-sqla <args> --url <url>`, checked as `invoke` checks it."""
    return await invoke(*args, "--url", url, code=code, input=input)


async def cli_json(url: str, *args: str):
    return json.loads((await cli(url, *args, "--json")).stdout)
