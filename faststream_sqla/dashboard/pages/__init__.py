"""The dashboard's HTML pages (Jinja2 templates, htmx from the package's static files):
`install_pages` adds them, and the login page, to the app."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse, Response

from . import login, views
from .access import SignInFirst
from .templating import error_page


def install_pages(app: FastAPI) -> None:
    async def sign_in_first(request: Request, error: Exception) -> Response:
        root = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(f"{root}/login", status_code=303)

    app.add_exception_handler(SignInFirst, sign_in_first)
    app.include_router(login.router)
    app.include_router(views.router)


__all__ = ["error_page", "install_pages"]
