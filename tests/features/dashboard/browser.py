"""The dashboard served for a real browser: uvicorn on a free 127.0.0.1 port in a
thread of its own, and headless Chromium (Debian's, through Playwright)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import uvicorn
from fastapi import FastAPI
from playwright.async_api import Browser, async_playwright

#: Debian's Chromium (CI installs it with apt); Playwright's own download is not used
CHROMIUM = "/usr/bin/chromium"


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """`app` served over HTTP until the block ends; its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # uvicorn announces its start only through this flag
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the dashboard's server did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"], headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()
