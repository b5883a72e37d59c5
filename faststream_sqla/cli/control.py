"""`faststream-sqla queue pause|resume|paused` and `faststream-sqla breaker
status|reset`: what operators set for every consumer of a queue, and its circuit
breaker, through `faststream_sqla.admin`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from faststream_sqla.admin.channels import channel_name
from faststream_sqla.exceptions import InvalidOptionError, InvalidQueueNameError
from faststream_sqla.formatting import timestamp
from faststream_sqla.schema import validate_queue_name

from .common import Admin, admin_command, app, out, print_json, usage_error
from .operate import listing

queue_app = typer.Typer(
    help="Pause and resume the consumers of a queue; its limits.", no_args_is_help=True
)
app.add_typer(queue_app, name="queue")
breaker_app = typer.Typer(
    help="The circuit breakers of the queues: their state, and a manual reset.",
    no_args_is_help=True,
)
app.add_typer(breaker_app, name="breaker")


def _queue_name(value: str) -> str:
    try:
        return validate_queue_name(value)
    except InvalidQueueNameError as e:
        usage_error(str(e))


Name = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue.", callback=_queue_name)]


def _optional_queue_name(value: str | None) -> str | None:
    return None if value is None else _queue_name(value)


OptionalName = Annotated[
    str | None,
    typer.Argument(
        metavar="[QUEUE]",
        help="Only this queue (default: every breaker that ever counted a failure).",
        callback=_optional_queue_name,
        show_default=False,
    ),
]


def _optional_channel(value: str | None) -> str | None:
    try:
        return None if value is None else channel_name(value)
    except InvalidOptionError as e:
        usage_error(str(e))


BreakerChannel = Annotated[
    str | None,
    typer.Option(
        "--channel",
        metavar="NAME",
        help="The channel's own breaker (subscribers with circuit_breaker_per_channel).",
        callback=_optional_channel,
        show_default=False,
    ),
]


def _breaker_name(queue: str, channel: str | None) -> str:
    if channel is None:
        return f"queue {escape(repr(queue))}"
    return f"channel {escape(repr(channel))} of queue {escape(repr(queue))}"


def _set_paused(admin: Admin, queue: str, paused: bool) -> None:
    changed = admin(lambda a: a.pause_queue(queue) if paused else a.resume_queue(queue))
    if admin.json_output:
        return print_json({"queue": queue, "paused": paused, "changed": changed})
    name = escape(repr(queue))
    if paused:
        state = "paused" if changed else "was already paused"
        out.print(f"Queue {name} {state}: consumers stop claiming within a few seconds.")
    else:
        out.print(f"Queue {name} {'resumed' if changed else 'was not paused'}.")
    return None


@admin_command(queue_app)
def pause(admin: Admin, queue: Name) -> None:
    """Stop claims of QUEUE in every process within seconds; running handlers finish."""
    return _set_paused(admin, queue, True)


@admin_command(queue_app)
def resume(admin: Admin, queue: Name) -> None:
    """Let every consumer of QUEUE claim again."""
    return _set_paused(admin, queue, False)


@admin_command(queue_app, reads=True)
def paused(admin: Admin) -> None:
    """The paused queues."""
    names = admin(lambda a: a.paused_queues())
    if admin.json_output:
        return print_json(names)
    if not names:
        out.print("No queue is paused.")
    for name in names:
        out.print(escape(name))
    return None


@admin_command(breaker_app, reads=True)
def status(admin: Admin, queue: OptionalName = None) -> None:
    """State, consecutive failures, probe holder and recent transitions of the breakers
    (the queues', and their channels' own)."""
    found = admin(lambda a: a.breakers(queue))
    if admin.printed_json_or_empty(found, "No circuit breaker has counted a failure."):
        return None
    channels = any(b.channel is not None for b in found)
    table = listing(
        "queue",
        *(["channel"] if channels else []),
        "state",
        "failures",
        "since",
        "reopens at",
        "probe holder",
        first=[b.queue for b in found],
    )
    for b in found:
        table.add_row(
            escape(b.queue),
            *([escape(b.channel or "-")] if channels else []),
            b.state,
            str(b.consecutive_failures),
            timestamp(b.changed_at),
            timestamp(b.reopens_at) if b.state == "OPEN" else "-",
            escape(b.probe_holder or "-"),
        )
    out.print(table)
    # below the table, one per line: a narrow terminal would fold them into shreds
    for b in found:
        if b.recent:
            out.print(f"Recent transitions of {_breaker_name(b.queue, b.channel)}, newest first:")
        for t in b.recent:
            out.print(f"  {timestamp(t.at)}  {t.from_state} -> {t.to_state}  ({escape(t.reason)})")
    return None


@admin_command(breaker_app)
def reset(admin: Admin, queue: Name, channel: BreakerChannel = None) -> None:
    """Close QUEUE's breaker (or one channel's) and forget its failures; consumers claim
    again within seconds."""
    changed = admin(lambda a: a.reset_breaker(queue, channel=channel))
    if admin.json_output:
        return print_json(
            {"queue": queue, "channel": channel, "state": "CLOSED", "changed": changed}
        )
    if changed:
        out.print(
            f"Circuit breaker of {_breaker_name(queue, channel)} reset: CLOSED, consumers "
            "claim again within a few seconds."
        )
    else:
        out.print(
            f"Circuit breaker of {_breaker_name(queue, channel)} was already closed, "
            "with no failures counted."
        )
    return None
