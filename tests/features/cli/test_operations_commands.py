"""The operations commands on every database: `--json` read back, human output, exit
codes (0 done, 1 failed, 2 bad usage) and one-line errors without passwords."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from faststream_sqla import Envelope, MessageState, SqlaBroker
from faststream_sqla.lifecycle import settled_unhandled
from tests.support.cli import cli, cli_json


@pytest.fixture
async def seeded(database_url, engine, driver):
    """Queue q: two pending (one keyed), one dead letter; queue r: one dead letter."""
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("doomed", "p1", Envelope("p2", ordering_key="k"), queue="q")
        await broker.publish("r-doomed", queue="r")
    dead = []
    for queue in ("q", "r"):
        (message,) = await driver.claim(engine, queue, 1)
        outcome = settled_unhandled(message, MessageState.FAILED, "ValueError: broken")
        assert await driver.write_outcomes(engine, [outcome]) == 1
        dead.append(message.id)
    return dead


async def test_every_listing_reads_back_as_json(database_url, seeded):
    q_dead, r_dead = seeded
    stats = {s["queue"]: s for s in await cli_json(database_url, "queues")}
    assert set(stats) == {"q", "r"}
    assert stats["q"]["ready"] == {"value": 2, "exact": True}
    assert stats["q"]["failed_last_hour"]["value"] == 1

    found = await cli_json(database_url, "inspect", str(q_dead))
    assert (found["state"], found["archived"], found["payload_text"]) == ("FAILED", True, "doomed")

    page = await cli_json(database_url, "dlq", "list", "--limit", "1")
    assert len(page["items"]) == 1 and page["next_page"]
    rest = await cli_json(database_url, "dlq", "list", "--limit", "1", "--after", page["next_page"])
    assert {page["items"][0]["id"], rest["items"][0]["id"]} == {q_dead, r_dead}
    assert rest["next_page"] is None
    recent = await cli_json(database_url, "dlq", "list", "--queue", "r", "--since", "1h")
    assert [d["id"] for d in recent["items"]] == [r_dead]

    (summary,) = await cli_json(database_url, "dlq", "summary", "--queue", "q")
    assert summary["common_errors"] == [{"error": "ValueError: broken", "count": 1}]


async def test_changes_report_as_json(database_url, seeded, engine, tables):
    q_dead, r_dead = seeded
    moved = await cli_json(database_url, "dlq", "redrive", str(q_dead))
    (new_id,) = moved["moved"].values()
    assert moved["moved"] == {str(q_dead): new_id}
    assert (await cli_json(database_url, "inspect", str(new_id)))["redriven_from"] == q_dead
    replayed = await cli_json(database_url, "replay", "--queue", "r", "--state", "failed")
    assert replayed["moved"].keys() == {str(r_dead)}
    purged = await cli_json(database_url, "purge", "q", "--yes")
    assert purged == {"queue": "q", "deleted": 3}  # p1, p2 and the redriven message

    old = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=2)
    async with engine.begin() as conn:
        await conn.execute(sa.update(tables.archive).values(archived_at=old))
    pruned = await cli_json(database_url, "archive", "prune", "--older-than", "1d", "--yes")
    assert pruned["deleted"] == 2


async def test_human_output(database_url, seeded):
    q_dead, _ = seeded
    listing = (await cli(database_url, "queues")).stdout
    assert "queue" in listing and "ready" in listing and " q " in listing
    shown = (await cli(database_url, "inspect", str(q_dead))).stdout
    assert "FAILED (in the archive)" in shown and "ValueError: broken" in shown
    assert "doomed" in (await cli(database_url, "inspect", str(q_dead), "--body")).stdout
    assert "broken" in (await cli(database_url, "dlq", "summary")).stdout  # wrapped at 80
    redrove = await cli(database_url, "dlq", "redrive", "--queue", "r")
    assert "Redrove 1 messages." in redrove.stdout


async def test_purge_asks_first(database_url, seeded):
    result = await cli(database_url, "purge", "q", code=1, input="n\n")
    assert "Aborted" in result.output


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["inspect", "999999"], 1, "no message 999999 in the queue or the archive"),
        (["purge", "nope", "--yes"], 1, "no queue 'nope'"),
        (["dlq", "redrive", "999999"], 1, "no message 999999"),
        (["dlq", "redrive"], 2, "give message ids, --queue NAME or --all"),
        (["replay", "--queue", "q", "--state", "REDRIVEN"], 2, "cannot replay state"),
        (["archive", "prune", "--older-than", "soon", "--yes"], 2, "not a duration"),
        (["archive", "prune", "--older-than", "0d", "--yes"], 2, "more than 0"),
        (["dlq", "list", "--since", "1h", "--until", "2h"], 2, "wrong way round"),
        (["dlq", "list", "--since", "yesterday"], 2, "neither an ISO 8601 time nor an age"),
        (["dlq", "list", "--after", "x"], 2, "not a page token"),
    ],
)
async def test_bad_input_is_one_line_and_a_meaningful_exit_code(
    database_url, seeded, args, code, expected
):
    result = await cli(database_url, *args, code=code)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [lines[0]] and expected in lines[0], result.output


@pytest.mark.parametrize(
    "args", [["queues"], ["inspect", "1"], ["dlq", "list"], ["purge", "q", "--yes"]]
)
async def test_an_unreachable_database_is_one_line_without_the_password(args):
    url = "postgresql+asyncpg://admin:hunter2@127.0.0.1:1/app"
    result = await cli(url, *args, code=1)
    assert "hunter2" not in result.output and "***" in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


async def test_archive_partition_commands(database_url, dialect_name, engine):
    if dialect_name != "postgresql":
        for args in (["archive", "partition"], ["archive", "maintain"]):
            result = await cli(database_url, *args, code=2)
            assert "archive partitions are a PostgreSQL feature" in result.output
        return
    from tests.features.maintenance.test_archive_partitions import _unpartition

    try:
        refused = await cli(database_url, "archive", "maintain", code=2)
        assert "is not partitioned; run: faststream-sqla archive partition" in refused.output
        made = await cli_json(database_url, "archive", "partition", "--months-ahead", "1")
        assert made["partitioned"] and len(made["created"]) == 2  # this month and the next
        kept = await cli_json(
            database_url, "archive", "maintain", "--retention", "400d", "--months-ahead", "1"
        )
        assert kept["created"] == [] and kept["months"] == made["created"]
        bad = await cli(database_url, "archive", "maintain", "--retention", "forever", code=2)
        assert "not a duration" in bad.output
    finally:
        await _unpartition(engine)
