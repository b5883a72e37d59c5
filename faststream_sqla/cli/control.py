"""`faststream-sqla queue pause|resume|paused`: what operators set for every consumer of
a queue, through `faststream_sqla.admin`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from faststream_sqla.exceptions import InvalidQueueNameError
from faststream_sqla.schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE, validate_queue_name

from .common import ArchiveTable, MessageTable, Url, app, out, usage_error
from .operate import Json, print_json, with_admin

queue_app = typer.Typer(help="Pause and resume the consumers of a queue.", no_args_is_help=True)
app.add_typer(queue_app, name="queue")



def _queue_name(value: str) -> str:
    try:
        return validate_queue_name(value)
    except InvalidQueueNameError as e:
        usage_error(str(e))


Name = Annotated[
    str, typer.Argument(metavar="QUEUE", help="The queue.", callback=_queue_name)
]


@queue_app.command()
def pause(
    url: Url,
    queue: Name,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Stop claims of QUEUE in every process within seconds; running handlers finish."""
    changed = with_admin(url, message_table, archive_table, lambda a: a.pause_queue(queue))
    if json_output:
        return print_json({"queue": queue, "paused": True, "changed": changed})
    state = "paused" if changed else "was already paused"
    out.print(f"Queue {escape(repr(queue))} {state}: consumers stop claiming within a few seconds.")
    return None


@queue_app.command()
def resume(
    url: Url,
    queue: Name,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Let every consumer of QUEUE claim again."""
    changed = with_admin(url, message_table, archive_table, lambda a: a.resume_queue(queue))
    if json_output:
        return print_json({"queue": queue, "paused": False, "changed": changed})
    state = "resumed" if changed else "was not paused"
    out.print(f"Queue {escape(repr(queue))} {state}.")
    return None


@queue_app.command()
def paused(
    url: Url,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """The paused queues."""
    names = with_admin(url, message_table, archive_table, lambda a: a.paused_queues())
    if json_output:
        return print_json(names)
    if not names:
        out.print("No queue is paused.")
    for name in names:
        out.print(escape(name))
    return None
