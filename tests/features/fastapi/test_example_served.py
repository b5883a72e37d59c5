"""`examples/fastapi_outbox.py` served as its docstring says, `uvicorn
examples.fastapi_outbox:app` (uvicorn comes with the `fastapi` extra), on every database:
an order posted over HTTP is confirmed by the handler of its outbox message."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import httpx

from examples.fastapi_outbox import Order

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
#: a guard against a server that never logs the line, not a synchronisation
LINE_TIMEOUT = 60.0


async def next_line_with(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> re.Match:
    """Read the server's log until a line matches `pattern`."""
    while True:
        try:
            line = (await asyncio.wait_for(stream.readline(), LINE_TIMEOUT)).decode()
        except TimeoutError:
            raise AssertionError(f"no line matched {pattern!r}:\n" + "".join(seen)) from None
        assert line, "the server exited:\n" + "".join(seen)
        seen.append(line)
        if found := re.search(pattern, line):
            return found


async def test_the_outbox_example_runs_under_uvicorn(database_url, engine):
    async with engine.begin() as conn:
        await conn.run_sync(Order.metadata.drop_all)
    server = await asyncio.create_subprocess_exec(
        str(BIN / "uvicorn"),
        "examples.fastapi_outbox:app",
        "--port",
        "0",
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": database_url},
        # uvicorn logs to stderr, FastStream (the handler's line) to stdout
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert server.stdout is not None
    seen: list[str] = []
    try:
        port = (await next_line_with(server.stdout, r"running on http://127\.0\.0\.1:(\d+)", seen))[
            1
        ]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            placed = await client.post("/orders", json={"item": "gadget", "quantity": 2})
            assert placed.status_code == 201, placed.text
            order_id = placed.json()["id"]
            await next_line_with(server.stdout, rf"order {order_id} confirmed", seen)
            order = (await client.get(f"/orders/{order_id}")).json()
        assert order == {"id": order_id, "item": "gadget", "status": "confirmed"}
    finally:
        if server.returncode is None:
            server.terminate()
            await server.wait()
        async with engine.begin() as conn:
            await conn.run_sync(Order.metadata.drop_all)
