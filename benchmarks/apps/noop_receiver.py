"""A webhook receiver for benchmarks/webhooks.py: answers 204 at once, or after a
second under /slow. Served by uvicorn in a process of its own."""

from __future__ import annotations

import asyncio


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    if scope["path"].startswith("/slow"):
        await asyncio.sleep(1.0)
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})
