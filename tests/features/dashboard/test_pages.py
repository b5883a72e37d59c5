"""The dashboard's pages on every database: each renders the figures the JSON API
reads, a message's body and errors show as text (never markup), read-only pages show
no action, a token dashboard sends a browser to its login page, whose cookie then
opens the pages and carries the CSRF token."""

from __future__ import annotations

import re

import sqlalchemy as sa

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.dashboard import TokenAuth, create_app
from faststream_sqla.dashboard.auth import SESSION_COOKIE
from faststream_sqla.dashboard.models import CountBody
from faststream_sqla.dashboard.pages.templating import age, count, cron_words

from .conftest import fail, open_breaker

SCRIPT = "<script>alert(1)</script>"
TOKEN = "a-token-long-enough-to-count"
#: every page that needs no id, and what each shows of the data the test made
PAGES = {
    "/": ["orders", "billing"],
    "/queues/orders": ["Queue orders", "acme"],
    "/messages?queue=orders&channel=acme": ["acme"],
    "/dead-letters": ["billing", "ValueError: bad data"],
    "/channels": ["acme"],
    "/breakers": ["OPEN"],
    "/schedules": ["nightly", "0 6 * * *", "At 06:00"],
    "/workers": ["No worker has registered"],
}
ACTION = re.compile(r"hx-(post|put)=")


async def _fill(database_url, engine, tables, driver) -> list[int]:
    """Messages in two queues (one with a script body), two dead letters, a schedule
    and an open breaker; the dead letters' ids."""
    async with SqlaBroker(database_url) as broker:
        broker.schedule("orders", {"kind": "nightly"}, cron="0 6 * * *", name="nightly")
        await broker.start()
        await broker.publish_batch(Envelope(SCRIPT, channel="acme"), Envelope("b"), queue="orders")
        await broker.publish_batch("x", "y", queue="billing")
    dead = await fail(driver, engine, "billing", 2)
    await open_breaker(engine, tables, "billing")
    return dead


async def _script_message(engine, tables) -> int:
    async with engine.connect() as conn:
        live = tables.for_dialect(engine.dialect.name).live
        for table in live:
            found = (await conn.execute(sa.select(table.c.id).where(table.c.queue == "orders"))).scalars()
            ids = sorted(found)
            if ids:
                return ids[0]
    raise AssertionError("the script message was not queued")


async def test_every_page_shows_the_data_and_its_actions(database_url, engine, tables, driver, dashboard):
    dead = await _fill(database_url, engine, tables, driver)
    async with dashboard() as http:
        for path, shown in PAGES.items():
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text)
            assert page.headers["content-type"].startswith("text/html")
            for text in shown:
                assert text in page.text, (path, text)
        queue = (await http.get("/queues/orders")).text
        assert ">Pause</button>" in queue and ">Purge</button>" in queue and "hx-confirm" in queue
        letter = (await http.get(f"/messages/{dead[0]}")).text
        assert "ValueError: bad data" in letter and ">Redrive</button>" in letter and ">Replay</button>" in letter
        assert ">Reset</button>" in (await http.get("/breakers")).text
        assert ">Pause</button>" in (await http.get("/schedules")).text


async def test_a_script_body_shows_as_text(database_url, engine, tables, driver, dashboard):
    await _fill(database_url, engine, tables, driver)
    message_id = await _script_message(engine, tables)
    async with dashboard() as http:
        for path in (f"/messages/{message_id}", "/queues/orders"):
            page = (await http.get(path)).text
            assert SCRIPT not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (await http.get(f"/messages/{message_id}")).text
        # a filter echoed into the page is text too
        echoed = (await http.get("/dead-letters", params={"error": SCRIPT})).text
        assert SCRIPT not in echoed and "&lt;script&gt;" in echoed


async def test_read_only_pages_show_no_action(database_url, engine, tables, driver, dashboard):
    dead = await _fill(database_url, engine, tables, driver)
    async with dashboard(read_only=True) as http:
        for path in [*PAGES, f"/messages/{dead[0]}"]:
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text)
            assert not ACTION.search(page.text), path
            assert "<button" not in page.text.replace('<button type="submit">Filter</button>', ""), path
            assert "read-only" in page.text


async def test_a_token_dashboard_signs_a_browser_in_with_a_cookie(database_url, dashboard):
    auth = TokenAuth(TOKEN)
    async with dashboard(auth=auth) as http:
        away = await http.get("/")
        assert away.status_code == 303 and away.headers["location"] == "/login"
        wrong = await http.post("/login", data={"token": "not-the-token-at-all"})
        assert wrong.status_code == 403 and "not this dashboard&#39;s token" in wrong.text
        assert auth.csrf_token not in wrong.text
        assert SESSION_COOKIE not in wrong.cookies
        signed = await http.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303 and signed.cookies[SESSION_COOKIE] == auth.session
        assert TOKEN not in signed.headers["set-cookie"]
        http.cookies.set(SESSION_COOKIE, auth.session)
        home = await http.get("/")
        assert home.status_code == 200 and f'content="{auth.csrf_token}"' in home.text
        assert TOKEN not in home.text


async def test_a_database_password_is_masked_on_the_pages():
    app = create_app("postgresql+asyncpg://ops:pa55-word-secret@127.0.0.1:1/none")
    async with app.router.lifespan_context(app):
        import httpx

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            page = (await http.get("/login")).text
    assert "pa55-word-secret" not in page and "ops:***@127.0.0.1:1/none" in page


async def test_an_app_made_from_a_url_disposes_its_engine_when_it_stops(database_url):
    app = create_app(database_url)
    disposed = []
    engine = app.state.dashboard.admin.engine
    sa.event.listen(engine.sync_engine, "engine_disposed", lambda e: disposed.append(e))
    async with app.router.lifespan_context(app):
        assert disposed == []
    assert disposed == [engine.sync_engine]


def test_cron_in_words_and_ages_as_people_read_them():
    assert cron_words("0 6 * * *") == "At 06:00"
    assert cron_words("*/5 * * * *") == "Every 5 minutes"
    assert cron_words("0 9 * * 1") == "At 09:00, only on Monday"
    assert cron_words("0 9 1-5 * *") == "At 09:00, between day 1 and 5 of the month"
    assert cron_words("not cron") == ""  # shown only as the expression
    assert cron_words(None) == ""
    assert (age(None), age(0), age(59.9), age(3725), age(90000)) == ("-", "0s", "59s", "1h 2m", "1d 1h")
    assert (count(CountBody(value=5000, exact=False)), count(CountBody(value=12, exact=True))) == ("5,000+", "12")


async def test_a_pages_error_is_a_page_and_the_apis_stays_json(dashboard):
    async with dashboard() as http:
        missing = await http.get("/messages/999999")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
        assert "999999" in missing.text and "Back to the overview" in missing.text
        bad = await http.get("/messages/0")
        assert bad.status_code == 400 and "<h1>400</h1>" in bad.text
        api = await http.get("/api/messages/999999")
        assert api.status_code == 404 and "999999" in api.json()["error"]


async def test_pages_mounted_under_a_path_link_under_it(engine):
    import httpx
    from fastapi import FastAPI

    outer = FastAPI()
    outer.mount("/queues", create_app(engine))
    transport = httpx.ASGITransport(app=outer)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        page = await http.get("/queues/")
        assert page.status_code == 200
        assert 'href="/queues/static/dashboard.css"' in page.text and 'href="/queues/workers"' in page.text
        assert (await http.get("/queues/static/htmx.min.js")).status_code == 200
        assert (await http.get("/queues/workers")).status_code == 200


async def test_the_overview_draws_each_queues_last_hour(database_url, engine, tables, driver, dashboard):
    await _fill(database_url, engine, tables, driver)
    async with dashboard() as http:
        hour = (await http.get("/api/queues/billing/throughput")).json()
        assert hour["span_seconds"] == 300 and hour["archived"][-1] == {"value": 2, "exact": True}
        assert (await http.get("/api/queues/billing/throughput", params={"spans": 0})).status_code == 400
        page = (await http.get("/")).text
    assert page.count('<svg class="sparkline"') == 2
    assert 'aria-label="2 archived in the last hour"' in page


async def test_a_basic_auth_dashboard_lets_the_browser_ask_for_credentials(dashboard):
    from faststream_sqla.dashboard import BasicAuth

    async with dashboard(auth=BasicAuth("ops", "s3cret-pass")) as http:
        asked = await http.get("/")
        assert asked.status_code == 401 and asked.headers["www-authenticate"].startswith("Basic")
        assert asked.headers["content-type"].startswith("text/html")
        assert (await http.get("/", auth=("ops", "s3cret-pass"))).status_code == 200
