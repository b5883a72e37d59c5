"""The pool adapter (drivers/_pool.py) against the installed SQLAlchemy: it reaches
into a private method, so an upgrade that changes it must fail here, loudly.

Checked on SQLAlchemy 2.0.38 and 2.1.9: CI runs this on the newest release that
pyproject.toml allows and on the lowest (.ci/run, "lowest versions")."""

from __future__ import annotations

import inspect
import logging

import pytest
import sqlalchemy
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool.base import _ConnectionFairy

from faststream_sqla.drivers._pool import check_in


def test_the_private_check_in_still_takes_transaction_reset():
    parameters = inspect.signature(_ConnectionFairy._close_special).parameters
    assert "transaction_reset" in parameters, (
        f"SQLAlchemy {sqlalchemy.__version__}: _ConnectionFairy._close_special no longer "
        "takes transaction_reset; update drivers/_pool.py (and the pin in pyproject.toml)"
    )


async def test_a_pooled_connection_still_names_its_pool(tmp_path):
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'named.db'}")
    try:
        fairy = await engine.raw_connection()
        assert fairy._pool is engine.sync_engine.pool, (
            f"SQLAlchemy {sqlalchemy.__version__}: a pooled connection no longer keeps "
            "its pool as _pool; update drivers/_pool.py"
        )
        await check_in(fairy, transaction_ended=True)
        assert engine.sync_engine.pool.checkedin() == 1
    finally:
        await engine.dispose()


@pytest.fixture
async def engine(tmp_path):
    eng = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}", pool_size=1, max_overflow=1
    )
    yield eng
    await eng.dispose()


async def test_a_check_in_after_the_transaction_ended_skips_the_reset(engine):
    # the pool's reset rolls back unless told the transaction was already reset
    rolled_back: list[bool] = []
    event.listen(
        engine.sync_engine.pool,
        "reset",
        lambda _conn, _record, state: rolled_back.append(not state.transaction_was_reset),
    )
    fairy = await engine.raw_connection()
    await check_in(fairy, transaction_ended=True)
    fairy = await engine.raw_connection()
    await check_in(fairy, transaction_ended=False)
    assert rolled_back == [False, True]
    assert engine.sync_engine.pool.checkedout() == 0


@pytest.mark.parametrize("transaction_ended", [True, False])
async def test_an_overflow_connection_is_closed_on_check_in(
    engine, caplog, transaction_ended
):
    caplog.set_level(logging.ERROR, logger="sqlalchemy.pool")
    closed: list[object] = []
    event.listen(engine.sync_engine.pool, "close", lambda *args: closed.append(args))
    first, second = await engine.raw_connection(), await engine.raw_connection()
    await check_in(first, transaction_ended=transaction_ended)
    await check_in(second, transaction_ended=transaction_ended)  # the pool is full again
    assert len(closed) == 1
    assert not caplog.records
    assert engine.sync_engine.pool.checkedout() == 0
