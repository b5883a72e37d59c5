"""`faststream-sqla schedule list|pause|resume|delete`: the interval and cron schedules,
through `faststream_sqla.admin` (the commands only parse, confirm, draw and exit)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from faststream_sqla.admin.models import ScheduleInfo
from faststream_sqla.schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE

from .common import ArchiveTable, MessageTable, Url, app, names_of, out
from .operate import Json, Yes, _time, listing, print_json, with_admin

schedule_app = typer.Typer(
    help="Interval and cron schedules: list, pause, resume, delete.", no_args_is_help=True
)
app.add_typer(schedule_app, name="schedule")

Name = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")]


def _timing(s: ScheduleInfo) -> str:
    if s.kind == "cron":
        return f"cron {s.cron} ({s.timezone})"
    return f"every {s.every_seconds:g}s"


@schedule_app.command("list")
def schedule_list(
    url: Url,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Every schedule: its queue, timing, state, next firing and ticks fired (--json
    adds the missed-tick policy, the last firing and the message)."""
    found = with_admin(url, message_table, archive_table, lambda a: a.schedules())
    if json_output:
        return print_json(found)
    if not found:
        out.print("No schedules.")
        return None
    table = listing(
        "name", "queue", "timing", "state", "next (UTC)", "fired", first=[s.name for s in found]
    )
    for s in found:
        table.add_row(
            escape(s.name),
            escape(s.queue),
            escape(_timing(s)),
            "paused" if s.paused else "active",
            _time(s.next_fire_at),
            f"{s.fired_count:,}",
        )
    out.print(table)
    return None


def _changed(found: ScheduleInfo, json_output: bool) -> None:
    if json_output:
        return print_json(found)
    if found.paused:
        out.print(f"Schedule {escape(found.name)} paused.")
    else:
        out.print(
            f"Schedule {escape(found.name)} resumed; next firing {_time(found.next_fire_at)} UTC."
        )
    return None


@schedule_app.command("pause")
def schedule_pause(
    url: Url,
    name: Name,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Stop firing a schedule until resumed (kept across restarts)."""
    found = with_admin(url, message_table, archive_table, lambda a: a.pause_schedule(name))
    return _changed(found, json_output)


@schedule_app.command("resume")
def schedule_resume(
    url: Url,
    name: Name,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Fire a paused schedule again from its next tick (missed ticks are not fired)."""
    found = with_admin(url, message_table, archive_table, lambda a: a.resume_schedule(name))
    return _changed(found, json_output)


@schedule_app.command("delete")
def schedule_delete(
    url: Url,
    name: Name,
    yes: Yes = False,
    json_output: Json = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Remove a schedule. A process whose code still declares it writes it again at
    its next start: remove it from the code first."""
    names_of(message_table, archive_table)  # before the question
    if not yes:
        typer.confirm(f"Delete schedule {name!r}?", abort=True)
    with_admin(url, message_table, archive_table, lambda a: a.delete_schedule(name))
    if json_output:
        return print_json({"deleted": name})
    out.print(f"Deleted schedule {escape(name)}.")
    return None
