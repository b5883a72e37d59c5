"""Who may see the pages: the API's own check, except that a browser without the
session cookie of a token dashboard is sent to the login page instead of a JSON 403."""

from __future__ import annotations

from starlette.requests import Request

from ..auth import SESSION_COOKIE, TokenAuth, check_request
from ..errors import Refused
from ..settings import settings_of


class SignInFirst(Exception):
    """A page asked for without the session cookie: the app answers with the login page."""


def page_access(request: Request) -> None:
    """Every page's dependency."""
    auth = settings_of(request).auth
    try:
        check_request(request, auth)
    except Refused:
        if isinstance(auth, TokenAuth) and "authorization" not in request.headers:
            raise SignInFirst from None
        raise


__all__ = ["SESSION_COOKIE", "SignInFirst", "page_access"]
