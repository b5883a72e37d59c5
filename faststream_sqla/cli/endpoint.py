"""`faststream-sqla endpoint add|update|list|disable|enable|remove|rotate-secret|
subscribe|unsubscribe`: the HTTP endpoints webhooks go to, through `faststream_sqla.admin`. A
secret is printed in full only by `add` and `rotate-secret`, the one time it is made."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer
from rich.markup import escape

from faststream_sqla.durations import seconds_of
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.formatting import timestamp

from .common import Admin, admin_command, app, out, print_json, usage_error
from .operate import listing
from .publish import parse_headers

endpoint_app = typer.Typer(
    help="Webhook endpoints: add, update, list, disable, enable, remove, rotate their secrets.",
    no_args_is_help=True,
)
app.add_typer(endpoint_app, name="endpoint")

Name = Annotated[str, typer.Argument(metavar="NAME", help="The endpoint's name.")]


def _secret_lines(endpoint: str, secret: str, json_output: bool, extra: dict) -> None:
    if json_output:
        print_json({"endpoint": endpoint, "secret": secret, **extra})
        return
    out.print(f"Secret of endpoint {escape(endpoint)} (shown once; give it to the receiver):")
    out.print(secret, highlight=False)


def _schedule(text: str) -> list[float]:
    """--retry-schedule's waits; bounds are the admin API's to check."""
    if not text.strip():
        return []
    try:
        return [seconds_of(part.strip(), "--retry-schedule") for part in text.split(",")]
    except InvalidOptionError as e:
        usage_error(str(e))


@admin_command(endpoint_app, "add")
def endpoint_add(
    admin: Admin,
    name: Name,
    endpoint_url: Annotated[str, typer.Argument(metavar="URL", help="Where to POST, http(s).")],
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", help="A topic pattern it receives (repeatable)."),
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Its deliveries in flight at once, every process.")
    ] = None,
    rate: Annotated[
        str | None, typer.Option(help="Its deliveries per period: 5/s, 100/min.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds a request may take.")] = 30.0,
    header: Annotated[
        list[str] | None, typer.Option("--header", help="A request header, NAME=VALUE.")
    ] = None,
    allow_private: Annotated[
        bool, typer.Option(help="Allow a host on a private, loopback or link-local address.")
    ] = False,
    retry_schedule: Annotated[
        str | None,
        typer.Option(
            help="The wait before each retry, comma-separated: 5s,5m,1h ('' never retries; "
            "default: 5 s to 10 h over seven retries)."
        ),
    ] = None,
) -> None:
    """Add an endpoint; its secret is printed once."""
    schedule = None if retry_schedule is None else _schedule(retry_schedule)
    made = admin(
        lambda a: a.add_endpoint(
            name, endpoint_url, topics=topic or [], max_concurrency=max_concurrency,
            rate=rate, timeout=timeout, headers=parse_headers(header or []),
            allow_private=allow_private, retry_schedule=schedule,
        )
    )  # fmt: skip
    if not admin.json_output:
        out.print(f"Added endpoint {escape(name)} for {escape(endpoint_url)}.")
    _secret_lines(made.endpoint, made.secret, admin.json_output, {"url": endpoint_url})


@admin_command(endpoint_app, "update")
def endpoint_update(
    admin: Admin,
    name: Name,
    endpoint_url: Annotated[
        str | None, typer.Option(help="Its new URL, http(s) (--url is the database's).")
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds a request may take.")] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", help="A request header, NAME=VALUE; replaces all of them."),
    ] = None,
    no_headers: Annotated[bool, typer.Option(help="Send no extra headers any more.")] = False,
    allow_private: Annotated[
        bool | None,
        typer.Option(
            "--allow-private/--no-allow-private",
            help="Allow, or no longer allow, a host on a private address.",
            show_default=False,
        ),
    ] = None,
    retry_schedule: Annotated[
        str | None,
        typer.Option(help="The wait before each retry: 5s,5m,1h ('' never retries; 'default')."),
    ] = None,
) -> None:
    """Change NAME's URL, timeout, headers or retries; its topics, secret and waiting
    deliveries stay."""
    if header and no_headers:
        usage_error("--header and --no-headers contradict each other: give one")
    changes: dict[str, object] = {}
    if endpoint_url is not None:
        changes["url"] = endpoint_url
    if timeout is not None:
        changes["timeout"] = timeout
    if header:
        changes["headers"] = parse_headers(header)
    elif no_headers:
        changes["headers"] = None
    if allow_private is not None:
        changes["allow_private"] = allow_private
    if retry_schedule is not None:
        changes["retry_schedule"] = (
            None if retry_schedule.strip() == "default" else _schedule(retry_schedule)
        )
    if not changes:
        usage_error(
            "nothing to change: give --endpoint-url, --timeout, --header, --no-headers, "
            "--allow-private or --retry-schedule"
        )
    changed = admin(lambda a: a.update_endpoint(name, **changes))  # type: ignore[arg-type]
    if admin.json_output:
        print_json(changed)
        return
    out.print(f"Updated endpoint {escape(name)}: {escape(changed.url)}.")


@admin_command(endpoint_app, "list", reads=True)
def endpoint_list(admin: Admin) -> None:
    """Every endpoint: URL, topics, state and the start of its secret."""
    found = admin(lambda a: a.endpoints())
    if admin.printed_json_or_empty(found, "No endpoints."):
        return
    table = listing(
        "name", "url", "topics", "state", "secret", "added (UTC)", first=[e.name for e in found]
    )
    for e in found:
        state = "enabled" if e.disabled_at is None else f"disabled: {e.disabled_reason}"
        secret = e.secret_hint + (" (rotating)" if e.rotating else "")
        table.add_row(
            escape(e.name), escape(e.url), escape(", ".join(e.topics)), escape(state),
            escape(secret), timestamp(e.created_at),
        )  # fmt: skip
    out.print(table)


@admin_command(endpoint_app, "disable")
def endpoint_disable(
    admin: Admin,
    name: Name,
    reason: Annotated[str, typer.Option(help="Why, shown by list.")] = "disabled by an operator",
) -> None:
    """No new deliveries to NAME; its pending ones wait until it is enabled."""
    changed = admin(lambda a: a.disable_endpoint(name, reason))
    if admin.json_output:
        print_json({"endpoint": name, "changed": changed})
        return
    out.print(
        f"Disabled endpoint {escape(name)}." if changed else f"{escape(name)} was disabled already."
    )


@admin_command(endpoint_app, "enable")
def endpoint_enable(admin: Admin, name: Name) -> None:
    """Deliver to NAME again, its waiting deliveries first."""
    changed = admin(lambda a: a.enable_endpoint(name))
    if admin.json_output:
        print_json({"endpoint": name, "changed": changed})
        return
    out.print(
        f"Enabled endpoint {escape(name)}." if changed else f"{escape(name)} was enabled already."
    )


@admin_command(endpoint_app, "remove")
def endpoint_remove(admin: Admin, name: Name) -> None:
    """Delete NAME, its topics and its waiting deliveries."""
    dropped = admin(lambda a: a.remove_endpoint(name))
    if admin.json_output:
        print_json({"endpoint": name, "deliveries_dropped": dropped})
        return
    out.print(f"Removed endpoint {escape(name)} and {dropped} waiting deliveries.")


@admin_command(endpoint_app, "rotate-secret")
def endpoint_rotate_secret(
    admin: Admin,
    name: Name,
    grace: Annotated[
        str, typer.Option(help="How long the old secret stays valid: seconds or 1h, 2d.")
    ] = "24h",
) -> None:
    """Give NAME a new secret, printed once; the old one is valid for --grace."""
    try:
        seconds = seconds_of(grace, "--grace")
    except InvalidOptionError as e:
        usage_error(str(e))
    made = admin(lambda a: a.rotate_secret(name, grace=timedelta(seconds=seconds)))
    _secret_lines(made.endpoint, made.secret, admin.json_output, {"grace_seconds": seconds})


@admin_command(endpoint_app, "subscribe")
def endpoint_subscribe(
    admin: Admin,
    name: Name,
    pattern: Annotated[str, typer.Argument(metavar="PATTERN", help="A topic pattern.")],
) -> None:
    """Send NAME the messages of PATTERN's topics too."""
    new = admin(lambda a: a.subscribe_endpoint(name, pattern))
    if admin.json_output:
        print_json({"endpoint": name, "pattern": pattern, "new": new})
        return
    out.print(
        f"Endpoint {escape(name)} receives {escape(pattern)}"
        + ("." if new else " (it already did).")
    )


@admin_command(endpoint_app, "unsubscribe")
def endpoint_unsubscribe(
    admin: Admin,
    name: Name,
    pattern: Annotated[str, typer.Argument(metavar="PATTERN", help="A topic pattern.")],
) -> None:
    """Stop sending NAME the messages of PATTERN's topics."""
    existed = admin(lambda a: a.unsubscribe_endpoint(name, pattern))
    if admin.json_output:
        print_json({"endpoint": name, "pattern": pattern, "existed": existed})
        return
    out.print(
        f"Endpoint {escape(name)} no longer receives {escape(pattern)}."
        if existed
        else f"Endpoint {escape(name)} did not receive {escape(pattern)}."
    )
