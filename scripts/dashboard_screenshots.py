"""Screenshots of the dashboard's pages for docs/dashboard.md, into docs/images/.

Fills a throwaway SQLite database with a few queues, dead letters, channel limits and a
schedule, keeps a broker running (so a worker is listed), serves the dashboard on a free
127.0.0.1 port and photographs each page in headless Chromium (Debian's, as the tests
use). Run from the repository: `python scripts/dashboard_screenshots.py`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from faststream_sqla import Envelope, SqlaBroker  # noqa: E402
from faststream_sqla.retry import NoRetryStrategy  # noqa: E402
from faststream_sqla.admin import QueueAdmin  # noqa: E402
from faststream_sqla.dashboard import create_app  # noqa: E402
from faststream_sqla.migrations import upgrade_schema  # noqa: E402
from tests.features.dashboard.browser import chromium, served  # noqa: E402

IMAGES = ROOT / "docs" / "images"
#: (file name, path): the pages the docs show
PAGES = [
    ("overview", "/"),
    ("queue", "/queues/orders"),
    ("message", "/messages/{dead}"),
    ("dead-letters", "/dead-letters"),
    ("channels", "/channels?queue=orders"),
    ("schedules", "/schedules"),
    ("workers", "/workers"),
]


async def fill(url: str, broker: SqlaBroker) -> int:
    """Sample data; the id of a dead letter."""
    await broker.publish_batch(
        *(Envelope({"order": n, "total": 10 * n}, channel=f"shop-{n % 3}") for n in range(40)),
        queue="orders",
    )
    await broker.publish_batch(*({"card": n, "ok": n % 4 != 0} for n in range(12)), queue="payments")
    await broker.publish_batch(*(f"mail {n}" for n in range(5)), queue="emails")
    async with QueueAdmin(url) as admin:
        await admin.set_channel_limits("orders", "shop-0", max_concurrency=2, rate="5/s")
        await admin.set_queue_limits("orders", channel_max_concurrency=4)
        await admin.pause_queue("emails")
        while True:  # the payments subscriber fails every fourth card at once
            found = await admin.dead_letters(queue="payments", limit=10)
            if len(found.items) == 3:
                return found.items[0].id
            await asyncio.sleep(0.05)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/queue.db"
        await upgrade_schema(url)
        broker = SqlaBroker(url)

        @broker.subscriber("payments", retry_strategy=NoRetryStrategy())
        async def charge(body: dict) -> None:
            if not body["ok"]:
                raise ValueError(f"card {body['card']} was declined")

        broker.schedule("emails", {"digest": "daily"}, cron="0 6 * * *", name="daily-digest")
        async with broker:
            await broker.start()
            dead = await fill(url, broker)
            with served(create_app(url)) as base:
                async with chromium() as browser:
                    page = await browser.new_page(viewport={"width": 1100, "height": 560})
                    for name, path in PAGES:
                        await page.goto(base + path.format(dead=dead))
                        await page.screenshot(path=IMAGES / f"dashboard-{name}.png")
                        print(f"docs/images/dashboard-{name}.png")


if __name__ == "__main__":
    asyncio.run(main())
