"""Database URLs, parsed once and shown only with their password masked."""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from .exceptions import InvalidOptionError

# user:password@ in anything that looks like a URL, parsable or not
_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def mask_passwords(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return _PASSWORD.sub(r"\1***@", text)


def masked(url: str | sa.URL) -> str:
    """A URL as it may be shown: in logs, errors, AsyncAPI documents and CLI output."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return mask_passwords(str(url))


def parse_url(url: str | sa.URL) -> sa.URL:
    """`url` parsed; InvalidOptionError (password masked) when it is not a database URL."""
    try:
        return make_url(url)
    except Exception as e:
        msg = f"not a database URL: {masked(url)} ({mask_passwords(str(e))})"
        raise InvalidOptionError(msg) from None
