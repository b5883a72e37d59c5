"""`faststream-sqla endpoint ...` on every database: the secret is printed by `add` and
`rotate-secret` only, `list` shows its first characters, and mistakes are one line."""

from __future__ import annotations

import json

from faststream_sqla.admin import QueueAdmin
from tests.support.cli import cli
from tests.support.helpers import run_script


async def test_add_prints_the_secret_once_and_list_shows_only_its_start(database_url) -> None:
    added = await cli(
        database_url, "endpoint", "add", "shop", "http://127.0.0.1:9/hook", "--topic",
        "orders.#", "--allow-private", "--max-concurrency", "2", "--header",
        "Authorization=Bearer partner-token", "--json",
    )  # fmt: skip
    secret = json.loads(added.stdout)["secret"]
    assert secret.startswith("whsec_")
    listed = await cli(database_url, "endpoint", "list")
    assert "shop" in listed.stdout and "orders.#" in listed.stdout
    assert secret not in listed.stdout and secret[:10] in listed.stdout
    assert "partner-token" not in listed.stdout
    rotated = json.loads(
        (await cli(database_url, "endpoint", "rotate-secret", "shop", "--grace", "1h", "--json")).stdout
    )
    assert rotated["secret"] != secret and rotated["grace_seconds"] == 3600
    await cli(database_url, "endpoint", "disable", "shop", "--reason", "maintenance")
    (shown,) = json.loads((await cli(database_url, "endpoint", "list", "--json")).stdout)
    assert shown["disabled_reason"] == "maintenance" and rotated["secret"] not in str(shown)
    assert shown["header_names"] == ["Authorization"] and "partner-token" not in str(shown)
    await cli(database_url, "endpoint", "enable", "shop")
    await cli(database_url, "endpoint", "subscribe", "shop", "refunds.*")
    async with QueueAdmin(database_url) as admin:
        assert (await admin.endpoint("shop")).topics == ("orders.#", "refunds.*")
    removed = await cli(database_url, "endpoint", "remove", "shop")
    assert "Removed endpoint shop" in removed.stdout


async def test_mistakes_are_one_line_naming_the_fix(database_url) -> None:
    private = await run_script(database_url, "endpoint", "add", "x", "http://127.0.0.1:9/h")
    assert private.returncode == 2
    assert "allow_private" in private.stderr and "Traceback" not in private.stderr
    missing = await cli(database_url, "endpoint", "enable", "nobody", code=1)
    assert "no endpoint 'nobody'" in missing.output


async def test_add_takes_a_retry_schedule_of_durations(database_url) -> None:
    await cli(
        database_url, "endpoint", "add", "shop", "http://127.0.0.1:9/hook",
        "--allow-private", "--retry-schedule", "5s, 2m,1h",
    )  # fmt: skip
    await cli(
        database_url, "endpoint", "add", "once", "http://127.0.0.1:9/hook",
        "--allow-private", "--retry-schedule", "",
    )  # fmt: skip
    async with QueueAdmin(database_url) as admin:
        assert (await admin.endpoint("shop")).retry_schedule == (5.0, 120.0, 3600.0)
        assert (await admin.endpoint("once")).retry_schedule == ()
    bad = await cli(
        database_url, "endpoint", "add", "x", "http://127.0.0.1:9/hook", "--allow-private",
        "--retry-schedule", "5s,soon", code=2,
    )  # fmt: skip
    assert "--retry-schedule" in bad.output and "soon" in bad.output
    too_long = await cli(
        database_url, "endpoint", "add", "x", "http://127.0.0.1:9/hook", "--allow-private",
        "--retry-schedule", "2d", code=2,
    )  # fmt: skip
    assert "each retry delay" in too_long.output
    async with QueueAdmin(database_url) as admin:
        assert [e.name for e in await admin.endpoints()] == ["once", "shop"]


async def test_update_changes_what_is_given(database_url) -> None:
    await cli(
        database_url, "endpoint", "add", "shop", "http://127.0.0.1:9/hook", "--allow-private",
        "--header", "X-Tenant=acme",
    )  # fmt: skip
    changed = json.loads(
        (
            await cli(
                database_url, "endpoint", "update", "shop", "--endpoint-url",
                "http://127.0.0.1:9/v2", "--timeout", "5", "--no-headers",
                "--retry-schedule", "1s,1m", "--json",
            )
        ).stdout
    )  # fmt: skip
    assert (changed["url"], changed["timeout"], changed["header_names"]) == (
        "http://127.0.0.1:9/v2", 5.0, []
    )  # fmt: skip
    assert changed["retry_schedule"] == [1.0, 60.0] and changed["allow_private"] is True
    refused = await cli(
        database_url, "endpoint", "update", "shop", "--no-allow-private", code=2
    )
    assert "private or local address" in refused.output
    nothing = await cli(database_url, "endpoint", "update", "shop", code=2)
    assert "nothing to change" in nothing.output
    await cli(database_url, "endpoint", "update", "shop", "--retry-schedule", "default")
    async with QueueAdmin(database_url) as admin:
        assert (await admin.endpoint("shop")).retry_schedule[0] == 5.0
