"""The claim grows while handlers empty the buffer fast, and stays small while they are
slow (subscriber/claim_size.py), on every database."""

from __future__ import annotations

import asyncio

import pytest

from faststream_sqla import SqlaBroker
from faststream_sqla.subscriber.fetcher import Fetcher

from tests.support.helpers import FAST, Recorder, archived


@pytest.fixture
def claim_limits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size every claim asked for; the real claim still runs."""
    limits: list[int] = []
    claim_round = Fetcher.claim_round

    async def recording(self: Fetcher, limit: int) -> int:
        limits.append(limit)
        return await claim_round(self, limit)

    monkeypatch.setattr(Fetcher, "claim_round", recording)
    return limits


async def drain(url: str, n: int, *, work_seconds: float = 0.0, **options: int) -> list:
    """Publish bodies 0..n-1, consume them all with `options`; the bodies handled."""
    broker = SqlaBroker(url)
    got = Recorder()

    @broker.subscriber("q", **options, **FAST)
    async def handle(body: int) -> None:
        if work_seconds:
            await asyncio.sleep(work_seconds)  # the handler's work, not a wait for state
        got.record(body)

    async with broker:
        await broker.publish_batch(*range(n), queue="q")
        await broker.start()
        await got.wait_for(n)
    return got.calls


async def test_fast_handlers_grow_the_claim_to_its_limit(
    database_url, engine, tables, claim_limits
) -> None:
    calls = await drain(
        database_url, 600, fetch_batch_size=2, max_fetch_batch_size=32, max_workers=4
    )

    assert sorted(calls) == list(range(600))
    assert claim_limits[0] == 2
    assert max(claim_limits) == 32
    # a buffer's worth of takes at the smallest size is enough to judge the rate by:
    # the claim goes to the size the rate asks for, not through every doubling
    # (2, 4, 8, 16, 32); a slow machine may need one step in between
    before_largest = claim_limits[: claim_limits.index(32)]
    assert len(set(before_largest)) <= 2
    assert len(await archived(engine, tables)) == 600  # every outcome written


async def test_a_fixed_claim_size_never_moves(database_url, claim_limits) -> None:
    calls = await drain(
        database_url, 300, fetch_batch_size=5, max_fetch_batch_size=5, max_workers=4
    )

    assert sorted(calls) == list(range(300))
    assert set(claim_limits) == {5}


async def test_slow_handlers_keep_the_claim_small(database_url, claim_limits) -> None:
    # one handler at five messages a second keeps a buffer of four (0.8 s of work)
    # inside the band, so the claim must not grow
    calls = await drain(
        database_url, 10, work_seconds=0.2, fetch_batch_size=2, max_fetch_batch_size=32
    )

    assert sorted(calls) == list(range(10))
    assert set(claim_limits) == {2}
