"""`faststream-sqla dashboard`: serve the dashboard (faststream_sqla.dashboard) with
uvicorn. Needs the `dashboard` extra; imported when the command runs, so the other
commands work without it."""

from __future__ import annotations

from typing import Annotated

import typer

from faststream_sqla.admin.api import DEFAULT_READ_TIMEOUT
from faststream_sqla.exceptions import InvalidOptionError

from .common import (
    DEFAULT_ARCHIVE_TABLE,
    DEFAULT_MESSAGE_TABLE,
    EXIT_USAGE,
    ArchiveTable,
    MessageTable,
    ReadUrl,
    Url,
    app,
    fail,
    integer_in,
    names_of,
)


@app.command()
def dashboard(
    url: Url,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", parser=integer_in(0, 65535), help="Port to listen on.")
    ] = 8000,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Refuse every change (403); hide the actions.")
    ] = False,
    base_path: Annotated[
        str, typer.Option("--base-path", help="Serve under this path, e.g. /queues.")
    ] = "",
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="FASTSTREAM_SQLA_DASHBOARD_TOKEN",
            help="Token the dashboard asks for (bearer header or the login page).",
            show_default=False,
        ),
    ] = None,
    basic_user: Annotated[
        str | None,
        typer.Option(
            "--basic-user", envvar="FASTSTREAM_SQLA_DASHBOARD_USER", help="Basic auth user."
        ),
    ] = None,
    basic_password: Annotated[
        str | None,
        typer.Option(
            "--basic-password",
            envvar="FASTSTREAM_SQLA_DASHBOARD_PASSWORD",
            help="Basic auth password.",
            show_default=False,
        ),
    ] = None,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
    read_url: ReadUrl = None,
    read_timeout: Annotated[
        float,
        typer.Option(
            "--read-timeout",
            help="Seconds (0.1 to 300) each read may take before its page says the "
            "database did not answer in time.",
        ),
    ] = DEFAULT_READ_TIMEOUT,
) -> None:
    """Serve the dashboard: the queues, messages, dead letters, channels, breakers and
    schedules of one database, and its JSON API under /api. Without auth it listens
    on a loopback address only. With --read-url the figures are read from that
    replica, its lag shown above them; changes still go to --url."""
    try:
        import uvicorn

        from faststream_sqla.admin import QueueAdmin
        from faststream_sqla.dashboard import BasicAuth, TokenAuth
        from faststream_sqla.dashboard.server import base_path_of, check_exposure, served_app
    except ImportError as e:
        raise fail(
            f"the dashboard needs its extra ({e.name} is missing): "
            'pip install "faststream-sqla[dashboard]"'
        ) from None
    try:
        if token is not None and (basic_user or basic_password):
            raise InvalidOptionError("choose a token or basic auth, not both")
        auth: TokenAuth | BasicAuth | None = None
        if token is not None:
            auth = TokenAuth(token)
        elif basic_user or basic_password:
            auth = BasicAuth(basic_user or "", basic_password or "")
        check_exposure(host, auth)
        mount = base_path_of(base_path)
        names = names_of(message_table, archive_table)
        admin = QueueAdmin(
            url,
            message_table=names.message,
            archive_table=names.archive,
            read_url=read_url,
            read_timeout=read_timeout,
        )
        served = served_app(admin, read_only=read_only, auth=auth, base_path=mount)
    except InvalidOptionError as e:
        raise fail(str(e), EXIT_USAGE) from None
    uvicorn.run(served, host=host, port=port, log_level="info")
