"""Who may use the dashboard and what read-only refuses: every POST and PUT of the
OpenAPI document is refused in read-only mode; a token or basic auth is asked for when
configured; a change made with the session cookie needs the CSRF header; a change from
another site's page is refused. Each on every database."""

from __future__ import annotations

import base64

import pytest

from faststream_sqla import InvalidOptionError
from faststream_sqla.dashboard import BasicAuth, TokenAuth
from faststream_sqla.dashboard.auth import CSRF_HEADER, SESSION_COOKIE

from .conftest import ok

TOKEN = "a-token-long-enough-to-count"


def changes(openapi: dict) -> list[tuple[str, str]]:
    """Every route that changes something, with a path that names a queue."""
    found = []
    for path, methods in openapi["paths"].items():
        for method in methods:
            if method in ("post", "put"):
                found.append((method, path.format(queue="q", name="s")))
    return found


async def test_read_only_refuses_every_change(dashboard):
    async with dashboard(read_only=True) as http:
        info = ok(await http.get("/api/info"))
        assert info["read_only"] is True
        routes = changes(ok(await http.get("/api/openapi.json")))
        assert len(routes) == 12
        for method, path in routes:
            answer = await http.request(method, path, params={"channel": "c"}, json={"ids": [1]})
            assert answer.status_code == 403, (method, path, answer.text)
            assert "read-only" in answer.json()["error"]
        assert ok(await http.get("/api/queues")) == {"queues": [], "replica": None}


async def test_a_token_is_asked_for_and_never_shown(dashboard):
    async with dashboard(auth=TokenAuth(TOKEN)) as http:
        refused = await http.get("/api/queues")
        assert refused.status_code == 403 and "bearer" in refused.json()["error"]
        wrong = await http.get("/api/queues", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert ok(await http.get("/api/queues", headers=bearer)) == {"queues": [], "replica": None}
        assert ok(await http.post("/api/queues/q/pause", headers=bearer)) == {"changed": True}
        assert TOKEN not in (await http.get("/api/openapi.json", headers=bearer)).text


async def test_the_session_cookie_changes_only_with_the_csrf_header(dashboard):
    auth = TokenAuth(TOKEN)
    async with dashboard(auth=auth) as http:
        http.cookies.set(SESSION_COOKIE, auth.session)
        assert ok(await http.get("/api/queues")) == {"queues": [], "replica": None}
        refused = await http.post("/api/queues/q/pause")
        assert refused.status_code == 403 and CSRF_HEADER in refused.json()["error"]
        done = await http.post("/api/queues/q/pause", headers={CSRF_HEADER: auth.csrf_token})
        assert ok(done) == {"changed": True}
        http.cookies.set(SESSION_COOKIE, "forged")
        assert (await http.get("/api/queues")).status_code == 403


async def test_basic_auth_challenges_and_accepts_its_credentials(dashboard):
    async with dashboard(auth=BasicAuth("ops", "s3cret-pass")) as http:
        refused = await http.get("/api/queues")
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
        wrong = base64.b64encode(b"ops:nope").decode()
        assert (await http.get("/api/queues", headers={"Authorization": f"Basic {wrong}"})).status_code == 401
        assert ok(await http.get("/api/queues", auth=("ops", "s3cret-pass"))) == {"queues": [], "replica": None}


async def test_a_change_from_another_sites_page_is_refused(api):
    foreign = await api.post("/api/queues/q/pause", headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "another site" in foreign.json()["error"]
    own = await api.post("/api/queues/q/pause", headers={"Origin": "http://dash"})
    assert ok(own) == {"changed": True}


def test_weak_credentials_are_refused():
    with pytest.raises(InvalidOptionError, match="at least 16 characters"):
        TokenAuth("short")
    with pytest.raises(InvalidOptionError, match="basic auth"):
        BasicAuth("a:b", "pw")
