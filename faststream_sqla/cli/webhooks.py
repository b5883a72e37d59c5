"""`faststream-sqla webhooks run`: a process that only delivers webhooks, until SIGINT
or SIGTERM (faststream_sqla.webhooks.WebhookDelivery on a broker of its own)."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE

from .common import ArchiveTable, MessageTable, Url, app, err, integer_in, names_of, run

webhooks_app = typer.Typer(help="Webhook delivery.", no_args_is_help=True)

app.add_typer(webhooks_app, name="webhooks")


@webhooks_app.command("run")
def webhooks_run(
    url: Url,
    max_workers: Annotated[
        int, typer.Option(parser=integer_in(1, 1000), help="Deliveries in flight at once.")
    ] = 32,
    release_stuck_timeout: Annotated[
        float,
        typer.Option(help="Seconds after which a delivery held by a dead process is retried."),
    ] = 30.0,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Deliver webhooks to the endpoints until stopped (SIGINT or SIGTERM)."""
    from faststream_sqla.broker.broker import SqlaBroker
    from faststream_sqla.webhooks import WebhookDelivery

    names = names_of(message_table, archive_table)

    async def action(engine: AsyncEngine) -> None:
        broker = SqlaBroker(engine, message_table=names.message, archive_table=names.archive)
        WebhookDelivery(
            broker, max_workers=max_workers, release_stuck_timeout=release_stuck_timeout
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with broker:
            await broker.start()
            err.print("Delivering webhooks; stop with Ctrl-C.", highlight=False)
            await stop.wait()

    run(url, action)
