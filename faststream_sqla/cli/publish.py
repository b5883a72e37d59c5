"""`faststream-sqla publish QUEUE BODY`: one message from a shell, e.g. to try a running
app or to hand a job to it."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from faststream.message import encode_message
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.durations import seconds_of
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.options import DeliveryOptions
from faststream_sqla.parser import CONTENT_TYPE_HEADER
from faststream_sqla.producer import row_options
from faststream_sqla.schema import DEFAULT_ARCHIVE_TABLE, DEFAULT_MESSAGE_TABLE
from faststream_sqla.topics import checked_topic

from .common import (
    ArchiveTable,
    MessageTable,
    Url,
    app,
    integer_in,
    names_of,
    out,
    queue_name,
    run,
    usage_error,
)

#: how JSON meant as an object, a list or a string begins; plain text rarely does
JSON_OPENERS = ("{", "[", '"')


def parse_body(text: str, *, as_text: bool = False) -> Any:
    """JSON if the text parses as JSON (an object, a list, a number...), else the text;
    all text with `as_text`. Text that opens like a JSON object, list or string but does
    not parse is a usage error: a typo such as {id: 1} would else be stored as text."""
    if as_text:
        return text
    try:
        return json.loads(text)
    except ValueError as e:
        if text.lstrip().startswith(JSON_OPENERS):
            usage_error(
                f"BODY looks like JSON but does not parse ({e}); fix it, or pass --text "
                "to publish it as text/plain"
            )
        return text


def stored_content_type(message: Any, headers: dict[str, str]) -> str | None:
    """The content type the publish stores: one given as a header, else the encoder's."""
    given = {name.lower(): value for name, value in headers.items()}.get(CONTENT_TYPE_HEADER)
    return given or encode_message(message, None)[1]


def parse_headers(pairs: list[str]) -> dict[str, str]:
    headers = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            usage_error(f"--header: {shown(pair)} is not NAME=VALUE")
        headers[name] = value
    return headers


@app.command()
def publish(
    queue: Annotated[
        str,
        typer.Argument(help="The queue to publish to (left out with --topic).", show_default=False),
    ],
    url: Url,
    body: Annotated[
        str | None,
        typer.Argument(
            help="The body: JSON if it parses as JSON, else text (text that opens like "
            "JSON must parse, or come with --text).",
            show_default=False,
        ),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option(
            help="Publish to a topic instead of a queue: a copy goes to every queue bound "
            "to it (docs/topics.md) and a delivery to every enabled webhook endpoint "
            "subscribed to it (docs/webhooks.md); then only BODY is given.",
            show_default=False,
        ),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", help="A header, NAME=VALUE (repeatable).")
    ] = None,
    delay: Annotated[
        str | None,
        typer.Option(help="Hold the message back: seconds (30) or a duration (5s, 1m, 2h)."),
    ] = None,
    ttl: Annotated[
        str | None,
        typer.Option(help="Expire the message unhandled after this long: seconds or 5m, 2h."),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            parser=integer_in(), help="0-10, higher first (default 0).", show_default=False
        ),
    ] = None,
    channel: Annotated[
        str | None,
        typer.Option(help="The channel whose limits it waits for (docs/flow-control.md)."),
    ] = None,
    ordering_key: Annotated[
        str | None, typer.Option(help="Handled one at a time per key, in publish order.")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="One waiting message per key: a second publish returns its id."),
    ] = None,
    as_text: Annotated[
        bool, typer.Option("--text", help="Publish BODY as text/plain, even if it is JSON.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON, for scripts.")] = False,
    message_table: MessageTable = DEFAULT_MESSAGE_TABLE,
    archive_table: ArchiveTable = DEFAULT_ARCHIVE_TABLE,
) -> None:
    """Publish one message and print its id (with --topic: the id of each copy and
    webhook delivery)."""
    from faststream_sqla.broker.broker import SqlaBroker  # the broker only for this command

    names = names_of(message_table, archive_table)
    if topic is not None:
        if body is not None:
            usage_error("pass either a QUEUE or --topic, not both: publish --topic TOPIC BODY")
        body, queue = queue, ""
        try:
            checked_topic(topic)
        except InvalidOptionError as e:
            usage_error(str(e))
    elif body is None:
        usage_error("missing BODY: publish QUEUE BODY, or publish --topic TOPIC BODY")
    else:
        queue_name(queue)
    headers = parse_headers(header or [])
    given = {
        "delay": delay,
        "ttl": ttl,
        "priority": priority,
        "channel": channel,
        "ordering_key": ordering_key,
        "idempotency_key": idempotency_key,
    }
    options: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    try:
        for name in ("delay", "ttl"):
            if name in options:
                options[name] = seconds_of(options[name], f"--{name}")
        # the publish's own checks, made here so that bad input is a usage error
        row_options(DeliveryOptions(**options))
    except InvalidOptionError as e:
        usage_error(str(e))
    message = parse_body(body, as_text=as_text)
    content_type = stored_content_type(message, headers)

    async def action(engine: AsyncEngine) -> int | list[int]:
        broker = SqlaBroker(
            engine, message_table=names.message, archive_table=names.archive, logger=None
        )
        async with broker:
            await broker.connect()
            if topic is not None:
                return await broker.publish(message, topic=topic, headers=headers, **options)
            return await broker.publish(message, queue=queue, headers=headers, **options)

    message_id = run(url, action)
    if isinstance(message_id, list):
        return _published_to_topic(message_id, str(topic), content_type, json_output)
    if json_output:
        typer.echo(json.dumps({"id": message_id, "queue": queue, "content_type": content_type}))
    else:
        stored_as = content_type or "an empty body"
        out.print(f"Published message {message_id} to {queue} ({stored_as}).", highlight=False)


def _published_to_topic(
    ids: list[int], topic: str, content_type: str | None, json_output: bool
) -> None:
    if json_output:
        typer.echo(json.dumps({"ids": ids, "topic": topic, "content_type": content_type}))
        return
    if not ids:
        out.print(
            f"No queue is bound to topic {topic} and no enabled endpoint subscribes to it: "
            "nothing was stored.",
            highlight=False,
        )
        return
    copies = "copy" if len(ids) == 1 else "copies"
    listed = ", ".join(map(str, ids))
    out.print(
        f"Published {len(ids)} {copies} to topic {topic}: messages {listed}.", highlight=False
    )
