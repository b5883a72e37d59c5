"""The dashboard served for a real browser: uvicorn on a free 127.0.0.1 port in a
thread of its own, and headless Chromium (Debian's, through Playwright)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Browser, async_playwright

from tests.support.http_server import served

__all__ = ["chromium", "served"]

#: Debian's Chromium (CI installs it with apt); Playwright's own download is not used
CHROMIUM = "/usr/bin/chromium"


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
