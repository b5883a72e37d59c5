"""`faststream-sqla topic bind|unbind|list|route`: which queues (and endpoints) a topic reaches,
through `faststream_sqla.admin` (the commands only parse, draw and exit)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from faststream_sqla.formatting import timestamp

from .common import Admin, admin_command, app, out, print_json
from .operate import listing

topic_app = typer.Typer(
    help="Topics: bind patterns to queues, unbind, list, and see where a topic goes.",
    no_args_is_help=True,
)
app.add_typer(topic_app, name="topic")

Pattern = Annotated[
    str,
    typer.Argument(
        metavar="PATTERN",
        help="Dot-separated words; * matches one word of a topic, # zero or more.",
    ),
]
Queue = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue that gets the copies.")]


@admin_command(topic_app, "bind")
def topic_bind(admin: Admin, pattern: Pattern, queue: Queue) -> None:
    """Copy every message published to a topic PATTERN matches into QUEUE."""
    new = admin(lambda a: a.bind(pattern, queue))
    if admin.json_output:
        return print_json({"pattern": pattern, "queue": queue, "new": new})
    already = "" if new else " (it already was)"
    out.print(f"Bound {escape(pattern)} to queue {escape(queue)}{already}.")
    return None


@admin_command(topic_app, "unbind")
def topic_unbind(admin: Admin, pattern: Pattern, queue: Queue) -> None:
    """Stop copying messages of PATTERN's topics into QUEUE (copies made stay)."""
    existed = admin(lambda a: a.unbind(pattern, queue))
    if admin.json_output:
        return print_json({"pattern": pattern, "queue": queue, "existed": existed})
    if existed:
        out.print(f"Unbound {escape(pattern)} from queue {escape(queue)}.")
    else:
        out.print(f"{escape(pattern)} was not bound to queue {escape(queue)}.")
    return None


@admin_command(topic_app, "list", reads=True)
def topic_list(
    admin: Admin,
    queue: Annotated[
        str | None, typer.Option("--queue", help="Only this queue's bindings.")
    ] = None,
) -> None:
    """Every binding: its pattern, its queue and when it was made."""
    found = admin(lambda a: a.bindings(queue=queue))
    if admin.printed_json_or_empty(found, "No bindings."):
        return None
    table = listing("pattern", "queue", "bound (UTC)", first=[b.pattern for b in found])
    for b in found:
        table.add_row(escape(b.pattern), escape(b.queue), timestamp(b.created_at))
    out.print(table)
    return None


@admin_command(topic_app, "route", reads=True)
def topic_route(
    admin: Admin,
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="A topic, without wildcards.")],
) -> None:
    """The queues and webhook endpoints a message published to TOPIC reaches now."""
    found = admin(lambda a: a.topic_route(topic))
    queues, endpoints = found.queues, found.endpoints
    if admin.json_output:
        return print_json({"topic": topic, "queues": queues, "endpoints": endpoints})
    if not queues and not endpoints:
        out.print(
            f"No queue is bound to a pattern matching {escape(topic)}, "
            "and no enabled endpoint subscribes to one."
        )
        return None
    table = listing("name", "kind", first=[*queues, *endpoints])
    for queue in queues:
        table.add_row(escape(queue), "queue")
    for endpoint in endpoints:
        table.add_row(escape(endpoint), "webhook endpoint")
    out.print(table)
    return None
