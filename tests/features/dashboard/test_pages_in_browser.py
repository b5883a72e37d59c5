"""The pages in headless Chromium against a served dashboard: the overview shows a
queue's depth and follows it live; a dead letter redriven from its page is handled by
a running broker; a queue paused from its page is claimed no more; read-only pages
show no action and the API refuses a change; a browser signs in with the token and
its changes carry the CSRF token; a channel's limits are edited and it is paused; a
schedule is paused and resumed; an open breaker is reset (each page redraws its table
after an action); every dead letter is replayed after a count,
and nothing moves when the count is declined. On every database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Page, expect

from faststream_sqla import Envelope, SqlaBroker, SqlaMessage
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.dashboard import TokenAuth, create_app

from tests.support.helpers import FAST, Recorder, captured_logger, recording, wait_until

from .browser import chromium, served
from .conftest import fail, open_breaker

#: long enough for a poll (every 3 s) on a machine shared with other test runs
LIVE = 15_000


def _accept_dialogs(page: Page) -> None:
    """hx-confirm asks with the browser's confirm(): answer yes."""
    page.on("dialog", lambda dialog: dialog.accept())


def _answer_dialogs(page: Page, answers: list[bool] | None = None) -> list[str]:
    """The questions the page's confirm() asks, in order, answered with `answers`
    (yes to every one when None)."""
    asked: list[str] = []
    left = iter(answers) if answers is not None else None

    async def answer(dialog) -> None:
        asked.append(dialog.message)
        await (dialog.accept() if left is None or next(left) else dialog.dismiss())

    page.on("dialog", answer)
    return asked


async def _three_dead_letters(database_url, engine, driver) -> None:
    """Messages a, b and c of the queue billing, dead letters."""
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("a", "b", "c", queue="billing")
    await fail(driver, engine, "billing", 3)


@asynccontextmanager
async def _page_at(database_url: str, path: str) -> AsyncIterator[Page]:
    """A page of a dashboard of `database_url`, at `path`, in Chromium."""
    with served(create_app(database_url)) as base:
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(base + path)
            yield page


@asynccontextmanager
async def _billing_dead_letters_page(
    database_url, engine, driver, answers: list[bool] | None = None
) -> AsyncIterator[tuple[Page, list[str]]]:
    """The dead-letters page of three dead letters of billing, in Chromium, and the
    questions it asks, answered with `answers` (yes to all when None)."""
    await _three_dead_letters(database_url, engine, driver)
    with served(create_app(database_url)) as base:
        async with chromium() as browser:
            page = await browser.new_page()
            asked = _answer_dialogs(page, answers)
            await page.goto(f"{base}/dead-letters?queue=billing")
            yield page, asked


async def test_the_overview_shows_a_queues_depth_and_follows_it(database_url):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("a", "b", "c", queue="orders")
        with served(create_app(database_url)) as base:
            async with chromium() as browser:
                page = await browser.new_page()
                await page.goto(base + "/")
                ready = page.locator('tr[data-queue="orders"] td').nth(1)
                await expect(ready).to_have_text("3")
                await broker.publish_batch("d", "e", queue="orders")
                await expect(ready).to_have_text("5", timeout=LIVE)


async def test_a_dead_letter_redriven_from_its_page_is_handled(database_url, engine, driver):
    async with SqlaBroker(database_url) as publisher:
        await publisher.connect()
        await publisher.publish("charge card 42", queue="billing")
    (dead,) = await fail(driver, engine, "billing", 1)

    broker = SqlaBroker(database_url)
    got = recording(broker, "billing")
    async with broker:
        await broker.start()
        with served(create_app(database_url)) as base:
            async with chromium() as browser:
                page = await browser.new_page()
                _accept_dialogs(page)
                await page.goto(f"{base}/messages/{dead}")
                await expect(page.locator("pre.error")).to_contain_text("ValueError: bad data")
                await page.get_by_role("button", name="Redrive", exact=True).click()
                await expect(page.locator("#flash")).to_have_text("moved 1")
                assert await got.wait_for(1) == ["charge card 42"]
                # redrawn: the archived message now points at the message it became,
                # and a redriven message offers no second redrive
                await expect(page.get_by_text("Moved on to")).to_be_visible()
                await expect(page.locator("dl.fields")).to_contain_text("REDRIVEN")
                redrive = page.get_by_role("button", name="Redrive", exact=True)
                await expect(redrive).to_have_count(0)


async def test_a_queue_paused_from_its_page_is_claimed_no_more(database_url):
    logger, lines = captured_logger(f"pages-pause-{id(database_url)}")
    broker = SqlaBroker(database_url, logger=logger)
    got = Recorder()

    @broker.subscriber(["work", "probe"], max_workers=2, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((msg.queue, body))

    async with broker:
        await broker.start()
        await broker.publish("first", queue="work")
        await got.wait_for(1)
        async with _page_at(database_url, "/queues/work") as page:
            await page.get_by_role("button", name="Pause").click()
            await expect(page.locator("#flash")).to_have_text("done")
            await expect(page.locator(".badge.paused")).to_be_visible(timeout=LIVE)
            await expect(page.get_by_role("button", name="Resume")).to_be_visible()

        async def noticed() -> bool:
            return bool(lines.containing("queue 'work' is paused"))

        await wait_until(noticed)
        await broker.publish("held", queue="work")
        await broker.publish_batch(*(f"p{i}" for i in range(10)), queue="probe")
        # the probes come from the same claim rounds that pass the paused queue over
        await got.wait_for(11)
        assert ("work", "held") not in got.calls


async def test_read_only_pages_show_no_action_and_the_api_refuses_a_change(database_url):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("a", queue="orders")
    with served(create_app(database_url, read_only=True)) as base:
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{base}/queues/orders")
            await expect(page.locator(".badge.read-only")).to_be_visible()
            await expect(page.get_by_role("heading", name="Queue orders")).to_be_visible()
            assert await page.locator("button").count() == 0
            refused = await page.request.post(f"{base}/api/queues/orders/pause")
            assert refused.status == 403
            assert "read-only" in (await refused.json())["error"]


async def test_a_browser_signs_in_with_the_token_and_changes_with_the_cookie(database_url):
    token = "a-token-long-enough-to-count"
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("a", queue="orders")
    with served(create_app(database_url, auth=TokenAuth(token))) as base:
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{base}/queues/orders")
            await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
            await page.get_by_label("Dashboard token").fill(token)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_role("heading", name="Queues")).to_be_visible()
            await page.goto(f"{base}/queues/orders")
            await page.get_by_role("button", name="Pause").click()
            await expect(page.locator("#flash")).to_have_text("done")
            await expect(page.get_by_role("button", name="Resume")).to_be_visible(timeout=LIVE)


async def test_dead_letters_are_redriven_by_selection_and_by_filter_after_a_count(
    database_url, engine, driver
):
    async with _billing_dead_letters_page(database_url, engine, driver) as (page, asked):
        await page.locator('input[name="ids"]').first.check()
        await page.get_by_role("button", name="Redrive selected").click()
        await expect(page.locator("#flash")).to_have_text("moved 1")
        # redrawn: the redriven dead letter is no longer listed
        await expect(page.locator('input[name="ids"]')).to_have_count(2)
        await page.get_by_role("button", name="Redrive all matching").click()
        await expect(page.locator("#flash")).to_have_text("moved 2")
        await expect(page.get_by_text("None matches.")).to_be_visible()
        assert asked == ["Redrive the selected dead letters?", "Redrive 2 messages?"]
    # three new messages, ready to be claimed
    assert len(await driver.claim(engine, "billing", 10)) == 3


async def test_a_channels_limits_are_edited_and_it_is_paused_from_the_channels_page(database_url):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(Envelope("a", channel="acme"), queue="orders")
    async with QueueAdmin(database_url) as admin:
        await admin.set_channel_limits("orders", "acme", rate="5/s")
        with served(create_app(database_url)) as base:
            async with chromium() as browser:
                page = await browser.new_page()
                await page.goto(f"{base}/channels?queue=orders")
                await page.get_by_label("max concurrency of acme").fill("3")
                await page.get_by_label("rate of acme").fill("")  # an emptied field removes it
                await page.get_by_role("button", name="Save").click()
                await expect(page.locator("#flash")).to_have_text("saved")
                # the table is redrawn with what the database now holds
                limit_in_force = page.locator("table.channels tbody tr").first.locator("td").nth(4)
                await expect(limit_in_force).to_have_text("3")
                await page.get_by_role("button", name="Pause").click()
                await expect(page.locator(".badge.paused")).to_be_visible()
                await expect(page.get_by_role("button", name="Resume")).to_be_visible()
        (acme,) = await admin.channels("orders")
    assert (acme.max_concurrency, acme.rate, acme.paused) == (3, None, True)


async def test_a_schedule_is_paused_and_resumed_from_the_schedules_page(database_url):
    async with SqlaBroker(database_url) as broker:
        broker.schedule("reports", {"kind": "daily"}, cron="0 6 * * *", name="daily")
        await broker.start()
    async with QueueAdmin(database_url) as admin:
        async with _page_at(database_url, "/schedules") as page:
            await page.get_by_role("button", name="Pause").click()
            await expect(page.locator("#flash")).to_have_text("saved")
            (daily,) = await admin.schedules()
            assert (daily.name, daily.paused) == ("daily", True)

            await expect(page.locator(".badge.paused")).to_be_visible()  # redrawn
            await page.get_by_role("button", name="Resume").click()
            # the flash already says "saved": the redrawn Pause button marks this one done
            await expect(page.get_by_role("button", name="Pause")).to_be_visible()
            (daily,) = await admin.schedules()
            assert not daily.paused


async def test_an_open_breaker_is_reset_from_the_breakers_page(database_url, engine, tables):
    await open_breaker(engine, tables, "billing")
    async with QueueAdmin(database_url) as admin:
        with served(create_app(database_url)) as base:
            async with chromium() as browser:
                page = await browser.new_page()
                asked = _answer_dialogs(page)
                await page.goto(f"{base}/breakers")
                row = page.locator("table.breakers tbody tr").first
                await expect(row).to_contain_text("OPEN")
                await page.get_by_role("button", name="Reset").click()
                await expect(page.locator("#flash")).to_have_text("done")
                await expect(row).to_contain_text("CLOSED")  # redrawn
                assert asked == ["Close this breaker and forget its failures?"]
        (breaker,) = await admin.breakers("billing")
    assert (breaker.state, breaker.consecutive_failures) == ("CLOSED", 0)


async def test_every_dead_letter_is_replayed_after_its_count_and_none_when_declined(
    database_url, engine, driver
):
    declined_then_accepted = [False, True]
    pages = _billing_dead_letters_page(database_url, engine, driver, declined_then_accepted)
    async with pages as (page, asked):
        replay_all = page.get_by_role("button", name="Replay all matching")
        await replay_all.click()
        await expect(page.locator("#flash")).to_have_text("nothing moved")
        assert await driver.claim(engine, "billing", 10) == []  # declined: nothing queued

        await replay_all.click()
        await expect(page.locator("#flash")).to_have_text("moved 3")
        assert asked == ["Replay 3 messages?", "Replay 3 messages?"]
    # three new messages, ready to be claimed
    assert sorted(m.payload for m in await driver.claim(engine, "billing", 10)) == [
        b"a",
        b"b",
        b"c",
    ]
