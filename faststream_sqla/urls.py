"""Database URLs, parsed once and shown only with their password masked."""

from __future__ import annotations

import re
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from .exceptions import InvalidOptionError

# user:password@ in anything that looks like a URL, parsable or not
_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def mask_passwords(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return _PASSWORD.sub(r"\1***@", text)


# what a query value may show unescaped and still parse back the same: a multi-host
# URL's `host=h1:p1&host=h2:p2` reads as written, not as `host=h1%3Ap1`
_READABLE_IN_QUERY = ":/,@[]"


def masked(url: str | sa.URL) -> str:
    """A URL as it may be shown: in logs, errors, AsyncAPI documents and CLI output.
    The password is masked; query values are escaped only where they must be, so the
    hosts of a multi-host URL read as given, and the text still parses as the URL."""
    try:
        parsed = make_url(url)
    except Exception:
        return mask_passwords(str(url))
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    if not parsed.query:
        return shown
    pairs = [
        f"{quote(key, safe='')}={quote(value, safe=_READABLE_IN_QUERY)}"
        for key, values in parsed.query.items()
        for value in ((values,) if isinstance(values, str) else values)
    ]
    return f"{shown}?{'&'.join(pairs)}"


def parse_url(url: str | sa.URL) -> sa.URL:
    """`url` parsed; InvalidOptionError (password masked) when it is not a database URL."""
    try:
        return make_url(url)
    except Exception as e:
        msg = f"not a database URL: {masked(url)} ({mask_passwords(str(e))})"
        raise InvalidOptionError(msg) from None
