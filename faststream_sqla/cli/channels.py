"""`faststream-sqla channel set|list|pause|resume` and `faststream-sqla queue limit`:
the limits of a queue's channels and of the queue, through `faststream_sqla.admin`
(the commands only parse, draw and exit). Every value is checked before anything is
written: a bad one ends the command with exit code 2."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.admin.channels import channel_name
from faststream_sqla.admin.models import ChannelStatus, QueueLimits
from faststream_sqla.channels.groups import is_group
from faststream_sqla.channels.limits import MAX_CONCURRENCY_LIMIT, Rate, checked_concurrency
from faststream_sqla.channels.store import UNSET, _Unset
from faststream_sqla.durations import whole_number
from faststream_sqla.exceptions import InvalidOptionError, shown

from .common import Admin, admin_command, app, out, print_json, usage_error
from .control import Name, _queue_name, queue_app
from .operate import listing

channel_app = typer.Typer(
    help="The channels of a queue: their limits, pause and resume.", no_args_is_help=True
)
app.add_typer(channel_app, name="channel")


def _channel(value: str) -> str:
    try:
        return channel_name(value)
    except InvalidOptionError as e:
        usage_error(str(e))


Channel = Annotated[
    str,
    typer.Argument(metavar="NAME", help="The channel, as messages carry it.", callback=_channel),
]
ChannelQueue = Annotated[
    str,
    typer.Option("--queue", metavar="QUEUE", help="The channel's queue.", callback=_queue_name),
]
NONE = "none"
MaxConcurrency = Annotated[
    str | None,
    typer.Option(
        "--max-concurrency",
        metavar="N|none",
        help="Messages in flight at once, across every process; none removes the limit.",
        show_default=False,
    ),
]
RateOption = Annotated[
    str | None,
    typer.Option(
        "--rate",
        metavar="RATE|none",
        help="Claims per period: 5/s, 100/min, 1000/h, 10/30s; none removes the limit.",
        show_default=False,
    ),
]


def parse_concurrency(text: str | None, option: str) -> int | _Unset | None:
    """An option's concurrency: UNSET when not given, None for `none`."""
    if text is None:
        return UNSET
    if text.strip().lower() == NONE:
        return None
    if (number := whole_number(text)) is None:
        usage_error(
            f"{option}: {shown(text)} is not a whole number from 1 to {MAX_CONCURRENCY_LIMIT:,} "
            "(or none, to remove the limit)"
        )
    try:
        return checked_concurrency(number, option)
    except InvalidOptionError as e:
        usage_error(str(e))


def parse_rate(text: str | None, option: str) -> Rate | _Unset | None:
    """An option's rate: UNSET when not given, None for `none`."""
    if text is None:
        return UNSET
    if text.strip().lower() == NONE:
        return None
    try:
        return Rate.parse(text)
    except InvalidOptionError as e:
        usage_error(f"{option}: {e}")


def _limit(own: object, effective: object = None) -> str:
    """A limit as a cell: its own value, else the queue's default for it, else none."""
    if own is not None:
        return str(own)
    if effective is not None:
        return f"{effective} (default)"
    return NONE


def _where(channel: str, queue: str) -> str:
    kind = "Group of channels" if is_group(channel) else "Channel"
    return f"{kind} {escape(repr(channel))} of queue {escape(repr(queue))}"


@admin_command(channel_app, "set")
def channel_set(
    admin: Admin,
    channel: Channel,
    queue: ChannelQueue,
    max_concurrency: MaxConcurrency = None,
    rate: RateOption = None,
) -> None:
    """Set a channel's own limits; every process follows within seconds, no restart."""
    most = parse_concurrency(max_concurrency, "--max-concurrency")
    per_period = parse_rate(rate, "--rate")
    if most is UNSET and per_period is UNSET:
        usage_error("nothing to set: give --max-concurrency and/or --rate (none removes a limit)")
    found = admin(
        lambda a: a.set_channel_limits(queue, channel, max_concurrency=most, rate=per_period)
    )
    if admin.json_output:
        return print_json(found)
    out.print(
        f"{_where(channel, queue)}: max concurrency "
        f"{_limit(found.max_concurrency, found.effective_max_concurrency)}, rate "
        f"{_limit(found.rate, found.effective_rate)}. Consumers follow within a few seconds."
    )
    return None


@admin_command(channel_app, "list", reads=True)
def channel_list(admin: Admin, queue: ChannelQueue) -> None:
    """A queue's channels: messages ready, in flight and later, and their limits."""

    async def read(a: QueueAdmin) -> tuple[QueueLimits, list[ChannelStatus]]:
        return await a.queue_limits(queue), await a.channels(queue)

    limits, found = admin(read)
    if admin.json_output:
        return print_json(found)
    name = escape(repr(queue))
    if limits.paused:
        out.print(f"Queue {name} is paused: none of its channels is claimed.")
    if limits.max_concurrency is not None or limits.rate is not None:
        out.print(
            f"Queue {name} as a whole: max concurrency {_limit(limits.max_concurrency)}, "
            f"rate {_limit(limits.rate)}."
        )
    if not found:
        out.print(f"Queue {name} has no channels: no limits set and no messages of one.")
        return None
    table = listing(
        "channel",
        "ready",
        "in flight",
        "later",
        "state",
        "max concurrency",
        "rate",
        first=[c.name for c in found],
    )
    for c in found:
        table.add_row(
            escape(c.name),
            f"{c.ready:,}",
            f"{c.in_flight:,}",
            f"{c.later:,}",
            "paused" if c.paused else "active",
            _limit(c.max_concurrency, c.effective_max_concurrency),
            _limit(c.rate, c.effective_rate),
        )
    out.print(table)
    return None


def _set_paused(admin: Admin, channel: str, queue: str, paused: bool) -> None:
    changed = admin(
        lambda a: a.pause_channel(queue, channel) if paused else a.resume_channel(queue, channel)
    )
    if admin.json_output:
        return print_json(
            {"queue": queue, "channel": channel, "paused": paused, "changed": changed}
        )
    if paused:
        state = "paused" if changed else "was already paused"
        out.print(
            f"{_where(channel, queue)} {state}: no more of its messages are claimed; "
            "those in flight finish."
        )
    else:
        out.print(f"{_where(channel, queue)} {'resumed' if changed else 'was not paused'}.")
    return None


@admin_command(channel_app, "pause")
def channel_pause(admin: Admin, channel: Channel, queue: ChannelQueue) -> None:
    """Stop claims of one channel in every process; the queue's other channels go on."""
    return _set_paused(admin, channel, queue, True)


@admin_command(channel_app, "resume")
def channel_resume(admin: Admin, channel: Channel, queue: ChannelQueue) -> None:
    """Let a paused channel be claimed again."""
    return _set_paused(admin, channel, queue, False)


@admin_command(queue_app, "limit")
def queue_limit(
    admin: Admin,
    queue: Name,
    max_concurrency: MaxConcurrency = None,
    rate: RateOption = None,
    channel_max_concurrency: Annotated[
        str | None,
        typer.Option(
            "--channel-max-concurrency",
            metavar="N|none",
            help="Each channel's max concurrency, unless it sets its own.",
            show_default=False,
        ),
    ] = None,
    channel_rate: Annotated[
        str | None,
        typer.Option(
            "--channel-rate",
            metavar="RATE|none",
            help="Each channel's rate, unless it sets its own.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Set QUEUE's limits and its channels' defaults; with no option, show them."""
    most = parse_concurrency(max_concurrency, "--max-concurrency")
    per_period = parse_rate(rate, "--rate")
    channel_most = parse_concurrency(channel_max_concurrency, "--channel-max-concurrency")
    channel_per_period = parse_rate(channel_rate, "--channel-rate")
    given = any(v is not UNSET for v in (most, per_period, channel_most, channel_per_period))
    if given:
        found = admin(
            lambda a: a.set_queue_limits(
                queue,
                max_concurrency=most,
                rate=per_period,
                channel_max_concurrency=channel_most,
                channel_rate=channel_per_period,
            )
        )
    else:
        found = admin(lambda a: a.queue_limits(queue))
    if admin.json_output:
        return print_json(found)
    state = "paused" if found.paused else "running"
    out.print(f"Queue {escape(repr(queue))} ({state}):")
    table = Table(show_header=False, box=None)
    for label, value in (
        ("max concurrency", found.max_concurrency),
        ("rate", found.rate),
        ("each channel's max concurrency", found.channel_max_concurrency),
        ("each channel's rate", found.channel_rate),
    ):
        table.add_row(f"[bold]{label}[/]", escape(_limit(value)))
    out.print(table)
    if given:
        out.print("Consumers follow within a few seconds.")
    return None
