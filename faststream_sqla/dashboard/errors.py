"""How the dashboard answers a failure: JSON `{"error": "..."}` with the status that
names its kind (400 bad input, 403 refused, 404 unknown, 409 conflict, 503 the
database), passwords masked, never a traceback; a page gets the same sentence on the
pages' error page."""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response

from faststream_sqla.exceptions import (
    DatabaseUnreachableError,
    InvalidOptionError,
    MessageStateConflictError,
    ReadTimeoutError,
    SchemaError,
    UnknownMessageError,
    UnknownQueueError,
    UnknownScheduleError,
)
from faststream_sqla.urls import mask_passwords

from .models import ErrorBody

logger = logging.getLogger("faststream_sqla.dashboard")

#: the statuses every route may answer besides its own, as the OpenAPI document says
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorBody, "description": "bad input"},
    403: {"model": ErrorBody, "description": "not authenticated, or read-only"},
    404: {"model": ErrorBody, "description": "unknown queue, message or schedule"},
    409: {"model": ErrorBody, "description": "the message is not in a state this takes"},
    503: {"model": ErrorBody, "description": "the database failed, or passed the read timeout"},
}


class Refused(Exception):
    """A request this dashboard does not serve: `status` and why."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


#: how a page (any path outside /api) answers an error: the pages' own error page
PageAnswer = Callable[[Request, int, str], Response]


def _for_api(request: Request) -> bool:
    root = request.scope.get("root_path", "").rstrip("/")
    return request.url.path.startswith(f"{root}/api/") or request.url.path == f"{root}/api"


def _status_of(error: Exception) -> int:
    if isinstance(error, MessageStateConflictError):
        return 409
    if isinstance(error, InvalidOptionError):
        return 400
    if isinstance(error, UnknownMessageError | UnknownQueueError | UnknownScheduleError):
        return 404
    return 503


def _validation_message(error: RequestValidationError) -> str:
    problems = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        problems.append(f"{where}: {item.get('msg', 'invalid')}" if where else item.get("msg", ""))
    return "; ".join(problems) or "invalid request"


def install_error_handlers(app: FastAPI, page_answer: PageAnswer | None = None) -> None:
    """Every error of ours, of FastAPI's request checks and of the database as JSON
    (or, for a page, as `page_answer` shows it)."""

    def _answer(
        request: Request, status: int, message: str, headers: dict[str, str] | None = None
    ) -> Response:
        message = mask_passwords(message)
        if page_answer is not None and not _for_api(request):
            answer = page_answer(request, status, message)
            answer.headers.update(headers or {})
            return answer
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    async def refused(request: Request, error: Exception) -> Response:
        assert isinstance(error, Refused)
        return _answer(request, error.status, str(error), error.headers)

    async def ours(request: Request, error: Exception) -> Response:
        return _answer(request, _status_of(error), str(error))

    async def timed_out(request: Request, error: Exception) -> Response:
        assert isinstance(error, ReadTimeoutError)
        message = (
            f"the database did not answer within {error.seconds:g} s; figures not shown. "
            "A lock held elsewhere or a heavy load may keep it busy: reload to try again."
        )
        return _answer(request, 503, message)

    async def bad_request(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        return _answer(request, 400, _validation_message(error))

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return _answer(
            request, error.status_code, str(error.detail), getattr(error, "headers", None)
        )

    async def database(request: Request, error: Exception) -> Response:
        # the driver's message can name the server; its password is masked, the
        # statement (bound values included) is left out
        reason = error.orig if isinstance(error, sa.exc.DBAPIError) else error
        logger.warning("dashboard: the database failed: %s", mask_passwords(repr(reason)))
        return _answer(request, 503, f"the database failed: {type(reason).__name__}: {reason}")

    app.add_exception_handler(Refused, refused)
    app.add_exception_handler(InvalidOptionError, ours)
    app.add_exception_handler(UnknownMessageError, ours)
    app.add_exception_handler(UnknownQueueError, ours)
    app.add_exception_handler(UnknownScheduleError, ours)
    app.add_exception_handler(SchemaError, ours)
    app.add_exception_handler(DatabaseUnreachableError, ours)
    app.add_exception_handler(ReadTimeoutError, timed_out)
    app.add_exception_handler(RequestValidationError, bad_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(sa.exc.SQLAlchemyError, database)
