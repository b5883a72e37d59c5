"""Errors raised on Spark's executors, raised again on the driver as our own types.

Spark reports a failed task's Python exception as text inside its own exception. Our
errors name the row, column or URL already; the driver finds the last one in that text
and raises it again with its type, so callers catch `InvalidOptionError`,
`MessageSerializationError` or `DatabaseUnreachableError` as from any other publish.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from faststream_sqla import exceptions
from faststream_sqla.urls import mask_passwords

_OURS = re.compile(r"faststream_sqla\.exceptions\.(?P<type>\w+): (?P<message>.*?)(?:\n|$)")


class SparkJobError(exceptions.SqlaBrokerError):
    """A Spark job of this package failed for a reason that is not one of our errors
    (the executor's own message is kept, passwords masked)."""


def _simple_error(name: str, message: str) -> exceptions.SqlaBrokerError | None:
    kind = getattr(exceptions, name, None)
    if not (isinstance(kind, type) and issubclass(kind, exceptions.SqlaBrokerError)):
        return None
    if kind is exceptions.IdempotencyConflictError:
        return kind(message, key="")
    try:
        return kind(message)
    except TypeError:  # an error whose constructor takes more than a message
        return None


@contextmanager
def executor_errors(what: str) -> Iterator[None]:
    """Raise an error of ours that a task raised as itself; anything else as
    SparkJobError saying `what` failed."""
    try:
        yield
    except exceptions.SqlaBrokerError:
        raise
    except Exception as e:
        text = str(e)
        found = list(_OURS.finditer(text))
        if found:
            last = found[-1]
            ours = _simple_error(last["type"], mask_passwords(last["message"]))
            if ours is not None:
                raise ours from None
        lines = [ln for ln in mask_passwords(text).splitlines() if ln.strip()]
        summary = lines[-1] if lines else type(e).__name__
        msg = f"{what} failed: {summary}"
        raise SparkJobError(msg) from None
