"""How the pages are rendered: one Jinja2 environment over the package's templates,
autoescaped (a message body is text, never markup), with the filters that turn the
API's read models into what a person reads."""

from __future__ import annotations

import hmac
import json
from pathlib import Path
from typing import Any

# the *Exception names: 2.x calls them *Error and keeps these, which 1.4 has
from cron_descriptor import (
    ExpressionDescriptor,
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
)
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from faststream_sqla.admin.models import Count
from faststream_sqla.formatting import age, timestamp

from ..auth import SESSION_COOKIE, TokenAuth
from ..models import Body, CountBody
from ..settings import settings_of

TEMPLATES = Path(__file__).parent.parent / "templates"


def count(value: CountBody) -> str:
    """A capped count as the admin API's `Count` reads: "500+" when it stopped counting."""
    return str(Count(value.value, value.exact))


def pretty_body(body: Body) -> str:
    """JSON indented, other text as it is, bytes as base64 (the API's encoding)."""
    if body.encoding != "text":
        return body.data
    try:
        return json.dumps(json.loads(body.data), indent=2, ensure_ascii=False)
    except ValueError:
        return body.data


def first_line(text: str | None) -> str:
    """An error's first line, for a table (the page of the message shows it whole)."""
    return (text or "").strip().split("\n", 1)[0]


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def cron_words(expression: str | None) -> str:
    """A cron expression in words, with 24-hour times ("At 06:00, only on Monday");
    "" for none, or one the library cannot read (the page shows the expression)."""
    if not expression:
        return ""
    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(ExpressionDescriptor(expression, options).get_description())
    except (FormatException, MissingFieldException, WrongArgumentException):
        return ""


SPARK_WIDTH, SPARK_HEIGHT = 120, 24


def sparkline(points: list[CountBody]) -> Markup:
    """The counts as an inline SVG line, scaled to the largest; built from numbers
    only, so it is safe to put in the page as markup."""
    values = [p.value for p in points]
    top = max(values, default=0) or 1
    step = SPARK_WIDTH / max(len(values) - 1, 1)
    coords = " ".join(
        f"{i * step:.1f},{SPARK_HEIGHT - 1 - (v / top) * (SPARK_HEIGHT - 2):.1f}"
        for i, v in enumerate(values)
    )
    total = sum(values)
    return Markup(
        f'<svg class="sparkline" width="{SPARK_WIDTH}" height="{SPARK_HEIGHT}" role="img" '
        f'aria-label="{total} archived in the last hour"><polyline points="{coords}"/></svg>'
    )


ENVIRONMENT = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENVIRONMENT.filters.update(
    age=age,
    count=count,
    first_line=first_line,
    when=timestamp,
    pretty_body=pretty_body,
    pretty_json=pretty_json,
)
ENVIRONMENT.filters["cron_words"] = cron_words
ENVIRONMENT.filters["sparkline"] = sparkline


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """`template` filled in with `context` and what every page shows: the database
    (password masked), read-only, the CSRF token a cookie's changes carry, the base
    path links start with."""
    settings = settings_of(request)
    auth = settings.auth
    # the CSRF token only for a page seen with the session cookie (not the login page)
    cookie = request.cookies.get(SESSION_COOKIE, "")
    csrf_token = ""
    if isinstance(auth, TokenAuth) and hmac.compare_digest(cookie, auth.session):
        csrf_token = auth.csrf_token
    html = ENVIRONMENT.get_template(template).render(
        request=request,
        root=request.scope.get("root_path", "").rstrip("/"),
        database=settings.database,
        read_only=settings.read_only,
        csrf_token=csrf_token,
        version=request.app.version,
        **context,
    )
    return HTMLResponse(html, status_code=status)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    """A page's error: the API's sentence (passwords already masked), as a page."""
    return render(request, "error.html", status, code=status, message=message)
