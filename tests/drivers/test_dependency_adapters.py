"""The adapters to dependencies' internals, against the installed versions.

Each adapter (docs/architecture.md, "Adapters to dependencies' internals") reaches into a
private attribute of a dependency. These tests check that each attribute is still there
and still does what the adapter relies on, and fail with the dependency's name and
version, so an upgrade that moves one breaks here and not silently in production.
SQLAlchemy's pool adapter has tests of its own in test_pool_adapter.py.

Checked on aiosqlite 0.20.0 and 0.22.1 and on FastStream 0.7.8: CI runs these on the
newest releases that pyproject.toml allows and on the lowest (.ci/run, "lowest versions").
"""

from __future__ import annotations

import sqlite3
import threading
import types
from importlib import metadata

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from faststream._internal.broker import BrokerUsecase
from faststream._internal.di import FastDependsConfig
from faststream._internal.endpoint.publisher import PublisherUsecase
from faststream._internal.endpoint.subscriber import SubscriberUsecase
from faststream._internal.testing.broker import TestBroker
from faststream.middlewares import AckPolicy
from faststream_sqla import SqlaBroker, SqlaRouter
from faststream_sqla._faststream import AUTO_ACK_DISABLED, serializer_of, set_auto_ack_disabled
from faststream_sqla.drivers.sqlite._aiosqlite import run_in_thread, runs_calls_in_thread


def _moved(dependency: str, what: str) -> str:
    return (
        f"{dependency} {metadata.version(dependency)}: {what}. The adapter was written for the "
        "range pinned in pyproject.toml; update the adapter (and the pin) for this release."
    )


# -- aiosqlite (drivers/sqlite/_aiosqlite.py) ---------------------------------------


async def test_aiosqlite_runs_a_function_on_its_thread_with_the_sqlite3_connection(tmp_path):
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'adapter.db'}")
    try:
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert runs_calls_in_thread(driver), _moved(
                "aiosqlite", "Connection._execute or the Connection._conn property is gone"
            )

            def work(connection: sqlite3.Connection) -> tuple[bool, int, int]:
                value = connection.execute("SELECT 41 + 1").fetchone()[0]
                return isinstance(connection, sqlite3.Connection), value, threading.get_ident()

            is_sqlite3, value, thread = await run_in_thread(driver, work)
    finally:
        await engine.dispose()
    assert is_sqlite3, _moved("aiosqlite", "Connection._conn is no sqlite3.Connection")
    assert value == 42
    assert thread != threading.get_ident(), _moved(
        "aiosqlite", "Connection._execute no longer runs the call on the connection's thread"
    )


def test_anything_but_aiosqlite_is_told_apart() -> None:
    assert not runs_calls_in_thread(object())
    assert not runs_calls_in_thread(sqlite3.connect(":memory:"))


# -- FastStream (_faststream.py) ------------------------------------------------------


def test_faststream_gives_its_default_serializer_when_none_was_configured() -> None:
    from fast_depends.pydantic import PydanticSerializer

    default = serializer_of(FastDependsConfig())
    assert isinstance(default, PydanticSerializer), _moved(
        "faststream", f"FastDependsConfig._serializer gave {default!r}"
    )
    assert serializer_of(FastDependsConfig(serializer=None)) is None


def test_faststream_keeps_auto_ack_disabled_in_its_name_mangled_slot() -> None:
    # Our subscriber class has a __dict__, so setting a slot that FastStream renamed
    # would quietly create a new attribute: the slot itself must still exist.
    slot = SubscriberUsecase.__dict__.get(AUTO_ACK_DISABLED)
    assert isinstance(slot, types.MemberDescriptorType), _moved(
        "faststream", f"SubscriberUsecase has no slot {AUTO_ACK_DISABLED}"
    )


def test_a_routers_manual_ack_policy_reaches_faststreams_slot() -> None:
    router = SqlaRouter(ack_policy=AckPolicy.MANUAL)
    sub = router.subscriber("q")

    @sub
    async def handle(body: str) -> None: ...

    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    broker.include_router(router)
    set_auto_ack_disabled(sub, sub._config.auto_ack_disabled)
    assert getattr(sub, AUTO_ACK_DISABLED) is True
    set_auto_ack_disabled(sub, False)
    assert getattr(sub, AUTO_ACK_DISABLED) is False


@pytest.mark.parametrize(
    ("base", "hook"),
    [
        (BrokerUsecase, "_connect"),
        (BrokerUsecase, "_setup_logger"),
        (BrokerUsecase, "_basic_publish"),
        (BrokerUsecase, "_basic_publish_batch"),
        (SubscriberUsecase, "_post_start"),
        (SubscriberUsecase, "_make_response_publisher"),
        (SubscriberUsecase, "_log"),
        (PublisherUsecase, "_publish"),
        (TestBroker, "_fake_connect"),
        (TestBroker, "_patch_producer"),
    ],
)
def test_faststream_still_calls_the_protected_hooks_we_override(base: type, hook: str) -> None:
    # an override of a hook FastStream renamed would never be called
    assert callable(getattr(base, hook, None)), _moved(
        "faststream", f"{base.__name__}.{hook} is gone"
    )
