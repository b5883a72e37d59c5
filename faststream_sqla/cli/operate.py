"""`faststream-sqla queues|inspect|purge|dlq|replay|archive|workers`: the running queues
and the processes that consume them, through
`faststream_sqla.admin` (the commands only parse, confirm, draw and exit)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Annotated, TypeVar

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from faststream_sqla.admin import QueueAdmin, to_json
from faststream_sqla.admin.api import MAX_BATCH, MAX_PAGE
from faststream_sqla.admin.archive import PRUNE_BATCH
from faststream_sqla.admin.dead_letters import first_line
from faststream_sqla.admin.messages import MESSAGE_LIST_STATES
from faststream_sqla.admin.models import MoveResult, QueueStats
from faststream_sqla.drivers.postgresql.partitions import MAX_MONTHS_AHEAD
from faststream_sqla.exceptions import shown
from faststream_sqla.formatting import age, timestamp
from faststream_sqla.worker_registry import PRUNE_AFTER

from .common import (
    Admin,
    admin_command,
    app,
    err,
    integer_in,
    out,
    print_json,
    queue_name,
    usage_error,
)

T = TypeVar("T")

dlq = typer.Typer(help="Dead letters: messages that failed or expired.", no_args_is_help=True)
app.add_typer(dlq, name="dlq")
archive_app = typer.Typer(help="The archive of settled messages.", no_args_is_help=True)
app.add_typer(archive_app, name="archive")

Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
Since = Annotated[
    str | None,
    typer.Option(help="From this time: ISO 8601 (UTC unless it says otherwise) or an age: 2h."),
]
Until = Annotated[str | None, typer.Option(help="Before this time: as --since.")]
#: the paging options of the commands that list a page at a time
PageLimit = Annotated[
    int,
    typer.Option(
        parser=integer_in(1, MAX_PAGE), metavar=f"1-{MAX_PAGE}", help="Messages per page."
    ),
]
After = Annotated[str | None, typer.Option(help="The next-page token a page printed.")]

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d|w)\s*$", re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: the longest duration accepted: anything longer is a typo
MAX_DURATION = timedelta(days=3650)


def parse_duration(text: str, option: str) -> timedelta:
    match = _DURATION.match(text)
    if match is None:
        usage_error(
            f"{option}: {shown(text)} is not a duration; write e.g. 90s, 15m, 12h, 30d or 2w"
        )
    value = timedelta(seconds=float(match.group(1)) * _UNIT[match.group(2)])
    if not timedelta(0) < value <= MAX_DURATION:
        usage_error(f"{option}: {shown(text)} must be more than 0 and at most 3650d")
    return value


def parsetimestamp(text: str | None, option: str) -> datetime | None:
    """An ISO 8601 time (naive means UTC) or an age (`2h`: two hours ago)."""
    if text is None:
        return None
    if _DURATION.match(text):
        return datetime.now(timezone.utc) - parse_duration(text, option)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        usage_error(f"{option}: {shown(text)} is neither an ISO 8601 time nor an age like 2h")
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def time_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    start, end = parsetimestamp(since, "--since"), parsetimestamp(until, "--until")
    if start is not None and end is not None and start >= end:
        usage_error(
            f"the time range is the wrong way round: --since {since} is not before --until {until}"
        )
    return start, end


@contextmanager
def progress_bar(label: str, json_output: bool) -> Iterator[Callable[[int, int | None], None]]:
    """A progress bar on stderr (stdout stays clean for --json) and its callback; it
    leaves the screen when done, the command then prints its result."""
    bar = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=json_output,
    )
    with bar:
        task = bar.add_task(label, total=None)

        def advance(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


def listing(*headers: str, first: list[str] | None = None) -> Table:
    """A table whose cells fold rather than cut, its first column (queue names, ids) as
    wide as its longest value: a name must show whole on a narrow terminal."""
    width = max((len(value) for value in (headers[0], *(first or ()))), default=0)
    return Table(
        Column(headers[0], min_width=width, overflow="fold"),
        *(Column(h, overflow="fold") for h in headers[1:]),
    )


def _print_page(table: Table, next_page: str | None) -> None:
    """A page's table, and the option that shows the next page when there is one."""
    out.print(table)
    if next_page is not None:
        out.print(f"More: --after {next_page}")


# -- looking -------------------------------------------------------------------------


def _flow(paused: bool, breaker: str) -> str:
    """What holds a queue's claims back, in one short cell: paused, and the breaker
    when it is not CLOSED; "-" when nothing does."""
    held = (["paused"] if paused else []) + ([breaker] if breaker != "CLOSED" else [])
    return ", ".join(held) or "-"


@admin_command(app, reads=True)
def queues(
    admin: Admin,
    queue: Annotated[list[str] | None, typer.Option(help="Only this queue (repeatable).")] = None,
) -> None:
    """Per queue: messages by state, failures, oldest ready age, handled per minute,
    whether it is paused and its circuit breaker's state."""

    async def read(a: QueueAdmin) -> tuple[list[QueueStats], set[str], dict[str, str]]:
        stats = await a.queues(queue or None)
        paused = set(await a.paused_queues())
        # the queue's own breaker (a channel's is in `breaker status`)
        breakers = {b.queue: b.state for b in await a.breakers() if b.channel is None}
        return stats, paused, breakers

    stats, paused, breakers = admin(read)
    if admin.json_output:
        return print_json(
            [
                {
                    **to_json(s),
                    "paused": s.queue in paused,
                    "breaker": breakers.get(s.queue, "CLOSED"),
                }
                for s in stats
            ]
        )
    if not stats:
        out.print("No queues: no message is queued or archived.")
        return None
    table = listing(
        "queue",
        "ready",
        "scheduled",
        "in flight",
        "retrying",
        "waiting",
        "failed 1h",
        "oldest ready",
        "done/failed 1m",
        "flow",
        first=[s.queue for s in stats],
    )
    for s in stats:
        table.add_row(
            escape(s.queue),
            str(s.ready),
            str(s.scheduled),
            str(s.processing),
            str(s.retrying),
            str(s.waiting),
            str(s.failed_last_hour),
            age(s.oldest_ready_age),
            f"{s.handled_last_minute}/{s.failed_last_minute}",
            _flow(s.queue in paused, breakers.get(s.queue, "CLOSED")),
        )
    out.print(table)
    return None


@admin_command(app, reads=True)
def messages(
    admin: Admin,
    queue: Annotated[str, typer.Argument(help="The queue whose messages to list.")],
    state: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Only this state (repeatable): {', '.join(MESSAGE_LIST_STATES)}.",
            show_default=False,
        ),
    ] = None,
    limit: PageLimit = 50,
    after: After = None,
) -> None:
    """A queue's live messages by state, oldest first, a page at a time."""
    queue_name(queue)
    page = admin(lambda a: a.messages(queue, states=state or None, limit=limit, after=after))
    if admin.printed_json_or_empty(
        page, f"No messages of queue {escape(queue)} in those states.", page.items
    ):
        return None
    table = listing("id", "state", "priority", "channel", "attempts", "created", "due", "error")
    for m in page.items:
        table.add_row(
            str(m.id),
            m.state,
            str(m.priority),
            escape(m.channel or "-"),
            str(m.attempts_count),
            timestamp(m.created_at),
            timestamp(m.next_attempt_at),
            escape(first_line(m.last_error))[:80] if m.last_error else "-",
        )
    return _print_page(table, page.next_page)


@admin_command(app, reads=True)
def inspect(
    admin: Admin,
    message_id: Annotated[
        int, typer.Argument(metavar="ID", parser=integer_in(), help="The message id.")
    ],
    body: Annotated[bool, typer.Option("--body", help="Print the whole body.")] = False,
) -> None:
    """One message, queued or archived."""
    found = admin(lambda a: a.inspect(message_id))
    if admin.json_output:
        return print_json(found)
    text = found.payload.decode(errors="replace")
    preview = text if body or len(text) <= 200 else text[:200] + f"... ({len(found.payload)} bytes)"
    where = "archive" if found.archived else "queue"
    rows = [
        ("id", str(found.id)),
        ("queue", found.queue),
        ("state", f"{found.state} (in the {where})"),
        ("priority", str(found.priority)),
        ("ordering key", found.ordering_key or "-"),
        ("channel", found.channel or "-"),
        ("topic", found.topic or "-"),
        ("idempotency key", found.idempotency_key or "-"),
        ("correlation id", found.correlation_id or "-"),
        ("attempts", str(found.attempts_count)),
        ("deliveries", str(found.deliveries_count)),
        ("created", timestamp(found.created_at)),
        ("first attempt", timestamp(found.first_attempt_at)),
        ("last attempt", timestamp(found.last_attempt_at)),
        ("expires", timestamp(found.expires_at)),
    ]
    if found.archived:
        rows.append(("archived", timestamp(found.archived_at)))
    else:
        rows += [
            ("next attempt", timestamp(found.next_attempt_at)),
            ("acquired", timestamp(found.acquired_at)),
        ]
        if found.held_by is not None:
            rows.append(("held by", f"worker {found.held_by}"))
    for a in found.webhook_attempts:
        answer = f"HTTP {a.status}" if a.status is not None else (a.error or "no response")
        first_line = (a.response_body or "").splitlines()[0][:80] if a.response_body else ""
        at = timestamp(a.at)
        rows.append(
            (f"webhook attempt {a.attempt}", f"{at}: {answer}, {a.latency * 1000:.0f} ms"
             + (f": {first_line}" if first_line else ""))
        )  # fmt: skip
    if found.redriven_from is not None:
        rows.append(("moved back from", f"archived message {found.redriven_from}"))
    if found.redriven_to is not None:
        rows.append(("moved back as", f"message {found.redriven_to}"))
    rows += [
        ("headers", json.dumps(found.headers)),
        ("last error", found.last_error or "-"),
        ("body", preview),
    ]
    table = Table(show_header=False, box=None)
    for name, value in rows:
        table.add_row(f"[bold]{name}[/]", escape(value))
    out.print(table)
    return None


@admin_command(app, reads=True)
def workers(
    admin: Admin,
    gone_after: Annotated[
        str | None,
        typer.Option(
            help="Call a worker gone after this silence (e.g. 90s, 5m; at most 1h); "
            "default: three of its own refresh intervals."
        ),
    ] = None,
) -> None:
    """The running broker processes: host, pid, alive or gone, the queues they consume,
    handlers in flight and messages held, when they started and were last seen."""
    threshold = None
    if gone_after is not None:
        threshold = parse_duration(gone_after, "--gone-after").total_seconds()
        if threshold > PRUNE_AFTER:
            usage_error(f"--gone-after: {shown(gone_after)} must be at most 1h")
    found = admin(lambda a: a.workers(gone_after=threshold))
    if admin.printed_json_or_empty(found, "No broker process is registered."):
        return None
    table = listing(
        "worker",
        "host",
        "pid",
        "status",
        "queues",
        "in flight",
        "held",
        "started",
        "last seen",
        "version",
        first=[w.worker_id for w in found],
    )
    for w in found:
        table.add_row(
            w.worker_id,
            escape(w.host),
            str(w.pid),
            w.status,
            escape(", ".join(w.queues) or "-"),
            str(w.in_flight),
            str(len(w.holding)),
            timestamp(w.started_at),
            f"{age(w.silent_for)} ago",
            escape(w.version),
        )
    out.print(table)
    return None


@admin_command(dlq, "list", reads=True)
def dlq_list(
    admin: Admin,
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    since: Since = None,
    until: Until = None,
    limit: PageLimit = 50,
    after: After = None,
) -> None:
    """Dead letters, newest first, a page at a time."""
    start, end = time_range(since, until)
    page = admin(
        lambda a: a.dead_letters(queue=queue, since=start, until=end, limit=limit, after=after)
    )
    if admin.printed_json_or_empty(page, "No dead letters.", page.items):
        return None
    table = listing("id", "queue", "state", "attempts", "archived", "error")
    for d in page.items:
        table.add_row(
            str(d.id),
            escape(d.queue),
            d.state,
            str(d.attempts_count),
            timestamp(d.archived_at),
            escape(first_line(d.last_error))[:120],
        )
    return _print_page(table, page.next_page)


@admin_command(dlq, "summary", reads=True)
def dlq_summary(
    admin: Admin, queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None
) -> None:
    """Per queue: how many dead letters, the oldest, the newest, the commonest errors."""
    found = admin(lambda a: a.dead_letter_summary(queue=queue))
    if admin.printed_json_or_empty(found, "No dead letters."):
        return None
    table = listing(
        "queue",
        "dead letters",
        "oldest",
        "newest",
        "most common errors",
        first=[s.queue for s in found],
    )
    for s in found:
        errors = "\n".join(f"{e.count} x {escape(e.error)[:100]}" for e in s.common_errors)
        table.add_row(
            escape(s.queue), str(s.count), timestamp(s.oldest), timestamp(s.newest), errors
        )
    out.print(table)
    return None


# -- changing ------------------------------------------------------------------------


@admin_command(app)
def purge(
    admin: Admin,
    queue: Annotated[str, typer.Argument(help="The queue to empty.")],
    yes: Yes = False,
) -> None:
    """Delete a queue's waiting messages (never those being handled)."""
    queue_name(queue)
    admin.check_tables()  # both before the question
    if not yes:
        typer.confirm(f"Delete every waiting message of queue {queue!r}?", abort=True)
    with progress_bar("purging", admin.json_output) as advance:
        deleted = admin(lambda a: a.purge(queue, progress=advance))
    if admin.json_output:
        return print_json({"queue": queue, "deleted": deleted})
    out.print(f"Deleted {deleted:,} waiting messages of queue {escape(queue)}.")
    return None


def _report_moves(result: MoveResult, json_output: bool, verb: str) -> None:
    if json_output:
        return print_json(result)
    out.print(f"{verb} {len(result.moved):,} messages.")
    for old, reason in result.skipped.items():
        out.print(f"Not moved: {old}: {reason}")
    return None


@admin_command(dlq, "redrive")
def dlq_redrive(
    admin: Admin,
    ids: Annotated[
        list[int] | None,
        typer.Argument(metavar="[ID]...", parser=integer_in(), help="Dead letters by id."),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Every dead letter of this queue.")] = None,
    all_queues: Annotated[bool, typer.Option("--all", help="Every dead letter.")] = False,
) -> None:
    """Dead letters back to their queue as new messages (the archive marks them REDRIVEN)."""
    if sum([bool(ids), queue is not None, all_queues]) != 1:
        usage_error("give message ids, --queue NAME or --all (exactly one)")
    with progress_bar("redriving", admin.json_output) as advance:
        result = admin(
            lambda a: a.redrive(
                ids=ids or None, queue=queue, all_queues=all_queues, progress=advance
            )
        )
    _report_moves(result, admin.json_output, "Redrove")


@admin_command(app)
def replay(
    admin: Admin,
    ids: Annotated[
        list[int] | None,
        typer.Argument(metavar="[ID]...", parser=integer_in(), help="Archived messages by id."),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Archived messages of this queue.")] = None,
    since: Since = None,
    until: Until = None,
    state: Annotated[
        list[str] | None,
        typer.Option(help="Only this final state (repeatable): COMPLETED, FAILED, EXPIRED."),
    ] = None,
) -> None:
    """Archived messages in any final state back to their queue, as redrive does."""
    if bool(ids) == (queue is not None):
        usage_error("give message ids or --queue NAME (exactly one)")
    start, end = time_range(since, until)
    states = [s.upper() for s in state] if state else None
    with progress_bar("replaying", admin.json_output) as advance:
        result = admin(
            lambda a: a.replay(
                ids=ids or None,
                queue=queue,
                since=start,
                until=end,
                states=states,
                progress=advance,
            )
        )
    _report_moves(result, admin.json_output, "Replayed")


@admin_command(archive_app, "prune")
def archive_prune(
    admin: Admin,
    older_than: Annotated[str, typer.Option(help="Age of the rows to delete, e.g. 30d.")],
    batch_size: Annotated[
        int,
        typer.Option(
            parser=integer_in(1, MAX_BATCH), metavar=f"1-{MAX_BATCH}", help="Rows per transaction."
        ),
    ] = PRUNE_BATCH,
    yes: Yes = False,
) -> None:
    """Delete archive rows older than --older-than, in batches (safe while workers run)."""
    age = parse_duration(older_than, "--older-than")
    admin.check_tables()  # before the question
    if not yes:
        typer.confirm(f"Delete every archived message older than {older_than}?", abort=True)
    with progress_bar("pruning", admin.json_output) as advance:
        deleted = admin(lambda a: a.prune_archive(age, batch_size=batch_size, progress=advance))
    if admin.json_output:
        return print_json({"deleted": deleted, "older_than_seconds": age.total_seconds()})
    out.print(f"Deleted {deleted:,} archived messages older than {older_than}.")
    return None


MonthsAhead = Annotated[
    int,
    typer.Option(
        parser=integer_in(0, MAX_MONTHS_AHEAD),
        metavar=f"0-{MAX_MONTHS_AHEAD}",
        help="Months of partitions to make ahead.",
    ),
]


@admin_command(archive_app, "partition")
def archive_partition(admin: Admin, months_ahead: MonthsAhead = 3) -> None:
    """PostgreSQL: partition the archive by month, keeping its rows (stop workers first)."""
    report = admin(lambda a: a.partition_archive(months_ahead=months_ahead))
    if admin.json_output:
        return print_json(report)
    if report.created:
        out.print(f"The archive is partitioned by month: {', '.join(report.created)}.")
    else:
        out.print("The archive was already partitioned.")
    return None


@admin_command(archive_app, "maintain")
def archive_maintain(
    admin: Admin,
    months_ahead: MonthsAhead = 3,
    retention: Annotated[
        str | None, typer.Option(help="Drop the months that ended longer ago, e.g. 365d.")
    ] = None,
) -> None:
    """PostgreSQL, partitioned archive: create the coming months, drop those past
    --retention. Run it daily (cron)."""
    keep = parse_duration(retention, "--retention") if retention is not None else None
    report = admin(lambda a: a.maintain_archive(months_ahead=months_ahead, retention=keep))
    if admin.json_output:
        return print_json(report)
    out.print(
        f"Created {len(report.created)} partitions, dropped {len(report.dropped)}; "
        f"months kept: {', '.join(report.months) or 'none'}."
    )
    return None
