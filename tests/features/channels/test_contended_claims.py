"""A channel claim that keeps losing the race to other processes' claims (each of its
writes finds the queue's version moved) gives up after a few reads, and its subscriber
claims again a moment later instead of at its next poll: with several processes on one
channelled queue, the losers otherwise sat out `max_fetch_interval` while the winners,
woken by their own outcomes, took every message.

The other processes are stood in for by a connection that counts the queue row's
version up between a claim's read and its write, a real conflict in the database.
SQLite has one writer at a time: its claims never conflict."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.channels import claim as channel_claim
from faststream_sqla.schema import WHOLE_QUEUE
from tests.conftest import on_servers
from tests.support.helpers import Recorder


@pytest.mark.parametrize("dialect_name", on_servers("postgresql", "mysql"), indirect=True)
async def test_a_channel_claim_that_lost_every_race_claims_again_before_its_next_poll(
    database_url, engine, tables, monkeypatch
):
    broker = SqlaBroker(database_url)
    handled = Recorder()

    # no poll comes within the test's time: only a prompt retry can deliver the message
    @broker.subscriber("q", max_fetch_interval=3600)
    async def handle(body: str) -> None:
        handled.record(body)

    real_write = channel_claim.write_planned
    lost: list[int] = []

    async def write_after_another_claim(session, queue, read, limit, *, channel_breakers):
        if len(lost) < channel_claim.CONFLICT_RETRIES:
            controls = tables.controls
            async with engine.begin() as conn:
                await conn.execute(
                    sa.update(controls)
                    .where(controls.c.queue == queue, controls.c.channel == WHOLE_QUEUE)
                    .values(version=controls.c.version + 1)
                )
            lost.append(1)
        return await real_write(session, queue, read, limit, channel_breakers=channel_breakers)

    monkeypatch.setattr(channel_claim, "write_planned", write_after_another_claim)
    async with broker:
        await broker.start()
        await broker.publish(Envelope("first", channel="tenant-a"), queue="q")
        await handled.wait_for(1)

    assert handled.calls == ["first"]
    assert len(lost) == channel_claim.CONFLICT_RETRIES  # every read of the first claim lost
