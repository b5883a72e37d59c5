"""Operating channels on every database: `QueueAdmin`'s channel and queue limits, pause
and resume of one channel, and the commands `faststream-sqla channel set|list|pause|
resume` and `faststream-sqla queue limit` (bad input refused with exit code 2 before
anything is written; a running broker follows a change without a restart)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from faststream_sqla import Envelope, MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.admin import ChannelStatus, QueueAdmin, QueueLimits
from faststream_sqla.channels import Rate
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.store import set_limits
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.lifecycle import settled_unhandled
from faststream_sqla.schema import WHOLE_QUEUE

from tests.support.helpers import FAST, Recorder, rows, run_python, run_script
from tests.support.cli import cli, cli_json
from tests.support.channels import Concurrency


@pytest.fixture
async def admin(engine):
    async with QueueAdmin(engine) as admin:
        yield admin


async def controls(engine, tables) -> dict[tuple[str, str], sa.RowMapping]:
    async with engine.connect() as conn:
        found = await conn.execute(sa.select(tables.controls))
        return {(row["queue"], row["channel"]): row for row in found.mappings()}


async def claim_one(driver, engine, queue):
    (message,) = await claim_channelled(driver, engine, queue, 1)
    return message


async def test_channels_show_their_messages_and_the_limits_that_apply(
    database_url, engine, driver, admin
):
    await admin.set_queue_limits("q", channel_max_concurrency=3, channel_rate="100/min")
    await admin.set_channel_limits("q", "b", max_concurrency=1, rate="5/s")
    await admin.set_channel_limits("q", "only-limits", rate=(10, 30))
    await admin.pause_channel("q", "c")  # nothing of it is claimed below
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(
            "b1", "b2", Envelope("b-later", delay=3600), queue="q", channel="b"
        )
        await broker.publish_batch(
            Envelope("head", ordering_key="k"), Envelope("behind", ordering_key="k"),
            queue="q", channel="c",
        )  # fmt: skip
        await broker.publish("plain", queue="q")  # no channel: not listed
        await broker.publish("elsewhere", queue="r", channel="b")
    claimed = await claim_one(driver, engine, "q")
    assert claimed.channel == "b"  # c is paused, the plain message comes after b

    found = await admin.channels("q")
    assert [c.name for c in found] == ["b", "c", "only-limits"]
    b, c, only = found
    assert b == ChannelStatus(
        name="b", ready=1, in_flight=1, later=1, paused=False,
        max_concurrency=1, rate=Rate(5, 1.0),
        effective_max_concurrency=1, effective_rate=Rate(5, 1.0),
    )  # fmt: skip
    assert (c.ready, c.in_flight, c.later, c.paused) == (1, 0, 1, True)  # behind: WAITING
    assert (c.max_concurrency, c.rate) == (None, None)
    assert (c.effective_max_concurrency, str(c.effective_rate)) == (3, "100/min")
    assert (only.ready, only.in_flight, only.later, str(only.rate)) == (0, 0, 0, "10/30s")
    assert await admin.channels("r") == [
        ChannelStatus("b", 1, 0, 0, False, None, None, None, None)
    ]
    assert await admin.channels("nobody") == []


async def test_queue_limits_read_back_and_none_removes_one(engine, admin, tables):
    assert await admin.queue_limits("q") == QueueLimits("q", None, None, None, None, False)
    limits = await admin.set_queue_limits(
        "q", max_concurrency=10, rate="1000/h", channel_max_concurrency=2
    )
    assert limits == QueueLimits("q", 10, Rate(1000, 3600.0), 2, None, False)
    assert str(limits.rate) == "1000/h"
    await admin.pause_queue("q")
    limits = await admin.set_queue_limits("q", rate=None, channel_rate="3/s")
    assert limits == QueueLimits("q", 10, None, 2, Rate(3, 1.0), True)
    assert await admin.queue_limits("q") == limits
    status = await admin.set_channel_limits("q", "a", max_concurrency=4)
    assert (status.max_concurrency, status.effective_max_concurrency) == (4, 4)
    status = await admin.set_channel_limits("q", "a", max_concurrency=None)
    assert (status.max_concurrency, status.effective_max_concurrency) == (None, 2)
    assert status.effective_rate == Rate(3, 1.0)


async def test_pause_and_resume_say_whether_they_changed_anything(engine, admin, tables):
    assert await admin.resume_channel("q", "a") is False
    # resuming a channel never paused leaves no row of it
    assert [key for key in await controls(engine, tables) if key[1] != WHOLE_QUEUE] == []
    assert await admin.channels("q") == []
    assert await admin.pause_channel("q", "a") is True
    assert await admin.pause_channel("q", "a") is False
    assert [(c.name, c.paused) for c in await admin.channels("q")] == [("a", True)]
    assert await admin.resume_channel("q", "a") is True
    assert await admin.resume_channel("q", "a") is False
    assert [(c.name, c.paused) for c in await admin.channels("q")] == [("a", False)]
    # the queue's own pause is apart from its channels'
    assert (await admin.queue_limits("q")).paused is False


async def test_setting_a_rate_again_keeps_its_window(engine, driver, admin, tables):
    # A rate's window counts the claims that started; writing the same rate again (a
    # script that re-applies its settings) must not forget them.
    await admin.set_channel_limits("q", "a", rate="5/s")
    window = {"rate_slot": 123, "rate_counts": "0,0,0,0,0,0,0,0,0,0,4"}
    async with engine.begin() as conn:
        await conn.execute(
            tables.controls.update()
            .where(tables.controls.c.queue == "q", tables.controls.c.channel == "a")
            .values(**window)
        )
    assert await set_limits(driver, engine, "q", "a", rate="5/s") is False
    assert await set_limits(driver, engine, "q", "a", max_concurrency=2) is True
    assert await set_limits(driver, engine, "q", "a", rate="8/s") is True
    after = (await controls(engine, tables))[("q", "a")]
    assert (after["rate_slot"], after["rate_counts"]) == (123, window["rate_counts"])
    assert (after["max_concurrency"], after["rate_count"]) == (2, 8)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda a: a.set_channel_limits("q", "a", max_concurrency=0), "must be from 1"),
        (lambda a: a.set_channel_limits("q", "a", max_concurrency=True), "whole number"),
        (lambda a: a.set_channel_limits("q", "a", rate="fast"), "a rate must look like"),
        (lambda a: a.set_channel_limits("q", "a"), "nothing to set"),
        (lambda a: a.set_channel_limits("q", "", rate="1/s"), "channel's name must be 1"),
        (lambda a: a.set_channel_limits("q", "x" * 256, rate="1/s"), "1 to 255 characters"),
        (lambda a: a.set_channel_limits("", "a", rate="1/s"), "queue name must not be empty"),
        (lambda a: a.set_queue_limits("q", channel_rate="0/s"), "count must be from 1"),
        (lambda a: a.set_queue_limits("q"), "nothing to set"),
        (lambda a: a.pause_channel("q", ""), "channel's name must be 1"),
        (lambda a: a.resume_channel("q", None), "channel's name must be 1"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_written(
    engine, admin, tables, call, error
):
    with pytest.raises(InvalidOptionError, match=error):
        await call(admin)
    assert await controls(engine, tables) == {}


async def test_a_message_shows_its_channel_and_keeps_it_when_redriven(
    database_url, engine, driver, admin
):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        live = await broker.publish("x", queue="q", channel="acme")
        await broker.publish("y", queue="dead", channel="acme")
    assert (await admin.inspect(live)).channel == "acme"
    shown = (await cli(database_url, "inspect", str(live))).stdout
    assert "channel" in shown and "acme" in shown
    assert (await cli_json(database_url, "inspect", str(live)))["channel"] == "acme"

    doomed = await claim_one(driver, engine, "dead")
    failed = settled_unhandled(doomed, MessageState.FAILED, "boom")
    assert await driver.write_outcomes(engine, [failed]) == 1
    assert (await admin.inspect(doomed.id)).channel == "acme"  # archived
    (new_id,) = (await admin.redrive(ids=[doomed.id])).moved.values()
    assert (await admin.inspect(new_id)).channel == "acme"  # back under its limits


# -- the commands ----------------------------------------------------------------------


async def test_channel_commands(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("1", "2", queue="q", channel="acme")

    said = await cli(
        database_url, "channel", "set", "acme", "--queue", "q", "--max-concurrency", "2",
        "--rate", "5/s",
    )  # fmt: skip
    assert "Channel 'acme' of queue 'q': max concurrency 2, rate 5/s" in said.stdout
    status = await cli_json(
        database_url, "channel", "set", "beta", "--queue", "q", "--rate", "10/30s"
    )
    assert status["name"] == "beta" and status["max_concurrency"] is None
    assert status["rate"] == {"count": 10, "period": 30.0, "text": "10/30s"}

    listed = await cli_json(database_url, "channel", "list", "--queue", "q")
    assert [(c["name"], c["ready"], c["paused"]) for c in listed] == [
        ("acme", 2, False), ("beta", 0, False)
    ]  # fmt: skip
    assert listed[0]["effective_max_concurrency"] == 2
    assert listed[0]["effective_rate"]["text"] == "5/s"

    paused = await cli_json(database_url, "channel", "pause", "acme", "--queue", "q")
    assert paused == {"queue": "q", "channel": "acme", "paused": True, "changed": True}
    again = await cli(database_url, "channel", "pause", "acme", "--queue", "q")
    assert "Channel 'acme' of queue 'q' was already paused" in again.stdout
    table = (await cli(database_url, "channel", "list", "--queue", "q")).stdout
    assert "acme" in table and "paused" in table and "10/30s" in table
    resumed = await cli(database_url, "channel", "resume", "acme", "--queue", "q")
    assert "Channel 'acme' of queue 'q' resumed." in resumed.stdout
    assert not (await cli_json(database_url, "channel", "list", "--queue", "q"))[0]["paused"]

    removed = await cli_json(
        database_url, "channel", "set", "acme", "--queue", "q", "--max-concurrency", "none",
        "--rate", "NONE",
    )  # fmt: skip
    assert (removed["max_concurrency"], removed["rate"]) == (None, None)
    empty = await cli(database_url, "channel", "list", "--queue", "other")
    assert "Queue 'other' has no channels" in empty.stdout
    rows_of = await controls(engine, tables)
    assert (rows_of[("q", "acme")]["max_concurrency"], rows_of[("q", "acme")]["paused"]) == (
        None, False
    )  # fmt: skip


async def test_queue_limit_command(database_url, engine, tables):
    shown = (await cli(database_url, "queue", "limit", "q")).stdout
    assert "Queue 'q' (running):" in shown and "max concurrency" in shown
    assert await controls(engine, tables) == {}  # showing writes nothing
    assert await cli_json(database_url, "queue", "limit", "q") == {
        "queue": "q", "max_concurrency": None, "rate": None,
        "channel_max_concurrency": None, "channel_rate": None, "paused": False,
    }  # fmt: skip
    limits = await cli_json(
        database_url, "queue", "limit", "q", "--max-concurrency", "8", "--rate", "100/min",
        "--channel-max-concurrency", "2", "--channel-rate", "1/s",
    )  # fmt: skip
    assert (limits["max_concurrency"], limits["rate"]["text"]) == (8, "100/min")
    assert (limits["channel_max_concurrency"], limits["channel_rate"]["text"]) == (2, "1/s")
    await cli(database_url, "queue", "pause", "q")
    changed = await cli(database_url, "queue", "limit", "q", "--rate", "none")
    assert "Queue 'q' (paused):" in changed.stdout
    assert "Consumers follow within a few seconds." in changed.stdout
    listing = (await cli(database_url, "channel", "list", "--queue", "q")).stdout
    assert "Queue 'q' is paused" in listing and "max concurrency 8" in listing
    row = (await controls(engine, tables))[("q", WHOLE_QUEUE)]
    assert (row["max_concurrency"], row["rate_count"], row["channel_rate_count"]) == (8, None, 1)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["channel", "set", "a", "--queue", "q", "--max-concurrency", "0"], "must be from 1"),
        (["channel", "set", "a", "--queue", "q", "--max-concurrency", "lots"], "not a whole"),
        (["channel", "set", "a", "--queue", "q", "--max-concurrency", "-1"], "not a whole"),
        (["channel", "set", "a", "--queue", "q", "--rate", "5 per second"], "must look like"),
        (["channel", "set", "a", "--queue", "q", "--rate", "5/1ms"], "period must be from"),
        (["channel", "set", "a", "--queue", "q"], "nothing to set"),
        (["channel", "set", "", "--queue", "q", "--rate", "1/s"], "channel's name must be 1"),
        (["channel", "set", "a", "--queue", "", "--rate", "1/s"], "queue name must not be"),
        (["channel", "pause", "x" * 256, "--queue", "q"], "1 to 255 characters"),
        (["channel", "resume", "a"], "Missing option '--queue'"),
        (["channel", "list"], "Missing option '--queue'"),
        (["queue", "limit", "q", "--channel-rate", "0/s"], "count must be from 1"),
        (["queue", "limit", "q", "--channel-max-concurrency", "2.5"], "not a whole number"),
        (["queue", "limit", "q", "--max-concurrency", "2", "--rate", "x"], "must look like"),
    ],
)
async def test_bad_values_exit_2_before_anything_is_written(
    database_url, engine, tables, args, expected
):
    result = await cli(database_url, *args, code=2)
    assert expected in result.output
    if "Missing option" not in expected:  # click's own usage message is a box
        assert result.output.count("\n") == 1, result.output  # one line
    assert await controls(engine, tables) == {}


async def test_changing_limits_from_the_shell_writes_nothing_on_stderr(
    database_url, engine, tables
):
    # Run as a shell runs them, where a driver's warning would reach stderr through
    # Python's last-resort logging handler. Each command finds the queue's control row
    # there from the second on, and the channel's from the second `channel set` on.
    for args in (
        ["channel", "set", "a", "--queue", "q", "--rate", "5/s"],
        ["channel", "set", "a", "--queue", "q", "--max-concurrency", "2"],
        ["channel", "pause", "a", "--queue", "q"],
        ["channel", "pause", "a", "--queue", "q"],
        ["channel", "resume", "a", "--queue", "q"],
        ["channel", "pause", "b", "--queue", "q"],
        ["queue", "limit", "q", "--rate", "100/min"],
        ["queue", "limit", "q", "--channel-max-concurrency", "3"],
        ["queue", "limit", "q"],
        ["channel", "list", "--queue", "q"],
    ):
        done = await run_script(database_url, *args)
        assert (done.returncode, done.stderr) == (0, ""), args
    row = (await controls(engine, tables))[("q", "a")]
    assert (row["max_concurrency"], row["rate_count"], row["paused"]) == (2, 5, False)
    assert (await controls(engine, tables))[("q", "b")]["paused"]


ADMIN_CALLS = """
import asyncio, sys
from faststream_sqla.admin import QueueAdmin

async def main(url):
    async with QueueAdmin(url) as admin:
        for _ in range(2):
            await admin.set_channel_limits("q", "a", max_concurrency=2, rate="5/s")
            await admin.set_queue_limits("q", rate="1/s", channel_rate="3/s")
            await admin.pause_channel("q", "a")
            await admin.resume_channel("q", "a")
        print((await admin.channels("q"))[0].rate)

asyncio.run(main(sys.argv[1]))
"""


async def test_changing_limits_through_queue_admin_writes_nothing_on_stderr(database_url):
    # A script of the user's own, with Python's default logging: nothing reaches stderr.
    done = await run_python(ADMIN_CALLS, database_url)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "5/s\n")


async def test_a_running_broker_follows_channel_set_without_a_restart(
    database_url, engine, driver
):
    # Limited to 1, then raised to 3 with the command while the workers run: the
    # handlers started after the change wait until three of them run at once, which
    # only the new limit allows (the test times out if the change is not followed).
    await set_limits(driver, engine, "work", "a", max_concurrency=1)
    broker = SqlaBroker(database_url)
    got = Recorder()
    seen = Concurrency()
    raised = False
    three_at_once = asyncio.Event()

    @broker.subscriber("work", max_workers=8, **FAST)
    async def handle(body: Any, msg: SqlaMessage) -> None:
        seen.enter(msg.channel)
        try:
            if seen.now["a"] >= 3:
                three_at_once.set()
            if raised:
                await asyncio.wait_for(three_at_once.wait(), 30)
            else:
                await asyncio.sleep(0.02)  # work that gives others the time to overlap
        finally:
            seen.leave(msg.channel)
        got.record(body)

    async with broker:
        await broker.start()
        await broker.publish_batch(*range(20), queue="work", channel="a")
        await got.wait_for(3)
        assert seen.peak["a"] == 1
        raised = True
        await cli(
            database_url, "channel", "set", "a", "--queue", "work", "--max-concurrency", "3"
        )
        await got.wait_for(20)
    assert three_at_once.is_set()
    assert seen.peak["a"] == 3  # reached, never passed
    assert not await rows(engine, driver.tables.message)
