"""Who may use the dashboard: a bearer token (or the session cookie the login page sets
from it), or basic credentials. Compared in constant time; never logged.

Changes (POST, PUT) made with the cookie must carry the CSRF token (header
`X-CSRF-Token`) that the pages embed; bearer and basic requests need none, since a
browser never adds those headers to another site's request by itself. A change whose
`Origin` names another site is refused whatever the credentials: a dashboard run
without auth on a loopback address must not be driven by a page the browser shows.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

from faststream_sqla.exceptions import InvalidOptionError

from .errors import Refused

#: the cookie the login page sets, and the header a cookie's changes carry
SESSION_COOKIE = "fsqla_dashboard_session"
CSRF_HEADER = "X-CSRF-Token"
#: methods that change nothing
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: the shortest token accepted: a guessable token is no protection beyond loopback
MIN_TOKEN_LENGTH = 16


def _equal(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _derived(secret: str, purpose: str) -> str:
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class TokenAuth:
    """A shared token, sent as `Authorization: Bearer <token>` (or entered once into
    the login page, which keeps a session cookie derived from it)."""

    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < MIN_TOKEN_LENGTH:
            msg = f"a dashboard token must be at least {MIN_TOKEN_LENGTH} characters"
            raise InvalidOptionError(msg)

    @property
    def session(self) -> str:
        """The cookie's value: derived from the token, so the cookie never holds it."""
        return _derived(self.token, "session")

    @property
    def csrf_token(self) -> str:
        return _derived(self.token, "csrf")

    def bearer_ok(self, given: str) -> bool:
        return _equal(given, self.token)


@dataclass(frozen=True)
class BasicAuth:
    """A user name and password, sent as HTTP basic auth."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.username or not self.password or ":" in self.username:
            raise InvalidOptionError("basic auth takes a user name (no ':') and a password")

    def credentials_ok(self, username: str, password: str) -> bool:
        # both compared, always: how long it takes says nothing of which was wrong
        user_ok = _equal(username, self.username)
        password_ok = _equal(password, self.password)
        return user_ok and password_ok


DashboardAuth = TokenAuth | BasicAuth


def _basic(header: str) -> tuple[str, str] | None:
    try:
        decoded = base64.b64decode(header, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    username, colon, password = decoded.partition(":")
    return (username, password) if colon else None


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not sent by a browser's cross-site request
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


def check_request(request: Request, auth: DashboardAuth | None) -> None:
    """Refused (403; 401 with a challenge for basic auth) unless `request` may go on."""
    changes = request.method not in SAFE_METHODS
    if changes and not _same_origin(request):
        raise Refused(403, "a change from another site's page is refused (Origin differs)")
    if auth is None:
        return
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if isinstance(auth, BasicAuth):
        given = _basic(value.strip()) if scheme.lower() == "basic" else None
        if given is None or not auth.credentials_ok(*given):
            challenge = {"WWW-Authenticate": 'Basic realm="faststream-sqla dashboard"'}
            raise Refused(401, "sign in: this dashboard takes basic auth", challenge)
        return
    if scheme.lower() == "bearer":
        if auth.bearer_ok(value.strip()):
            return
        raise Refused(403, "the bearer token is not this dashboard's")
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie is None or not _equal(cookie, auth.session):
        raise Refused(403, "not signed in: send the dashboard's token as a bearer header")
    if changes and not _equal(request.headers.get(CSRF_HEADER, ""), auth.csrf_token):
        raise Refused(403, f"a change made with the session cookie needs the {CSRF_HEADER} header")
