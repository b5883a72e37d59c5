"""`faststream-sqla schedule list|pause|resume|delete`: the interval and cron schedules,
through `faststream_sqla.admin` (the commands only parse, confirm, draw and exit)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from faststream_sqla.admin.models import ScheduleInfo
from faststream_sqla.formatting import timestamp

from .common import Admin, admin_command, app, out, print_json
from .operate import Yes, listing

schedule_app = typer.Typer(
    help="Interval and cron schedules: list, pause, resume, delete.", no_args_is_help=True
)
app.add_typer(schedule_app, name="schedule")

Name = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")]


def _timing(s: ScheduleInfo) -> str:
    if s.kind == "cron":
        return f"cron {s.cron} ({s.timezone})"
    return f"every {s.every_seconds:g}s"


@admin_command(schedule_app, "list", reads=True)
def schedule_list(admin: Admin) -> None:
    """Every schedule: its queue, timing, state, next firing and ticks fired (--json
    adds the missed-tick policy, the last firing and the message)."""
    found = admin(lambda a: a.schedules())
    if admin.printed_json_or_empty(found, "No schedules."):
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
            timestamp(s.next_fire_at),
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
        next_fire = timestamp(found.next_fire_at)
        out.print(f"Schedule {escape(found.name)} resumed; next firing {next_fire} UTC.")
    return None


@admin_command(schedule_app, "pause")
def schedule_pause(admin: Admin, name: Name) -> None:
    """Stop firing a schedule until resumed (kept across restarts)."""
    return _changed(admin(lambda a: a.pause_schedule(name)), admin.json_output)


@admin_command(schedule_app, "resume")
def schedule_resume(admin: Admin, name: Name) -> None:
    """Fire a paused schedule again from its next tick (missed ticks are not fired)."""
    return _changed(admin(lambda a: a.resume_schedule(name)), admin.json_output)


@admin_command(schedule_app, "delete")
def schedule_delete(admin: Admin, name: Name, yes: Yes = False) -> None:
    """Remove a schedule. A process whose code still declares it writes it again at
    its next start: remove it from the code first."""
    admin.check_tables()  # before the question
    if not yes:
        typer.confirm(f"Delete schedule {name!r}?", abort=True)
    admin(lambda a: a.delete_schedule(name))
    if admin.json_output:
        return print_json({"deleted": name})
    out.print(f"Deleted schedule {escape(name)}.")
    return None
