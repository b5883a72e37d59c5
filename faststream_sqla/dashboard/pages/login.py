"""The login page of a token dashboard: the token entered once becomes the session
cookie (derived from the token, never the token itself) the pages then send."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from ..auth import SESSION_COOKIE, TokenAuth, check_request
from ..settings import settings_of
from .templating import render

router = APIRouter(include_in_schema=False)

#: a login form is a token and little else
MAX_FORM_BYTES = 4096


def _cookie_path(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/") or "/"


@router.get("/login")
async def login_form(request: Request) -> Response:
    return render(request, "login.html", message="")


@router.post("/login")
async def login(request: Request) -> Response:
    auth = settings_of(request).auth
    # the Origin check of every change (a login from another site's page is refused)
    check_request(request, None)
    raw = await request.body()
    if not isinstance(auth, TokenAuth):
        return render(request, "login.html", 400, message="this dashboard takes no token")
    given = ""
    if len(raw) <= MAX_FORM_BYTES:
        given = parse_qs(raw.decode(errors="replace")).get("token", [""])[0]
    if not given or not auth.bearer_ok(given):
        return render(request, "login.html", 403, message="that is not this dashboard's token")
    home = _cookie_path(request)
    answer = RedirectResponse(home if home.endswith("/") else home + "/", status_code=303)
    answer.set_cookie(SESSION_COOKIE, auth.session, httponly=True, samesite="strict", path=home)
    return answer
