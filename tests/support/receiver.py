"""A webhook receiver on real HTTP: answers each request with the next scripted
response (200 once the script is spent) and keeps every request it got."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from tests.support.http_server import served


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when it arrived


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    #: seconds to wait before answering (a slow or hanging endpoint)
    wait: float = 0.0


class Receiver:
    def __init__(self, *replies: Reply) -> None:
        self.script = list(replies)
        self.requests: list[Received] = []
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send) -> None:  # an ASGI app
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = await request.body()
        with self._lock:
            self.requests.append(Received(dict(request.headers), body, time.time()))
            reply = self.script.pop(0) if self.script else Reply()
        if reply.wait:
            await asyncio.sleep(reply.wait)
        await Response(reply.body, reply.status, reply.headers)(scope, receive, send)

    def webhook_ids(self) -> list[str]:
        with self._lock:
            return [r.headers.get("webhook-id", "") for r in self.requests]


@contextmanager
def receiving(*replies: Reply) -> Iterator[tuple[Receiver, str]]:
    """A receiver served until the block ends, and its URL."""
    receiver = Receiver(*replies)
    with served(receiver) as url:
        yield receiver, url + "/hook"
