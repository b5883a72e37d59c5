"""PostgreSQL runs claims and outcome writes on the pool's asyncpg connection itself
(`drivers/postgresql/_asyncpg.py`): what that path must keep from SQLAlchemy's."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.drivers.postgresql._asyncpg import driver_connection
from faststream_sqla.drivers._compiled import DriverStatement
from faststream_sqla.drivers.base import Outcome
from faststream_sqla.drivers.postgresql.driver import outcome_parameters
from faststream_sqla.schema import MessageState, QueueTables

from tests.support.helpers import (
    claim_after_losing_the_connection,
    one_connection_engine,
    plain_message,
    prepared_driver,
)


@pytest.fixture
async def pg_engine(server_databases):
    async with one_connection_engine(server_databases["postgresql"]) as engine:
        yield engine


def test_constants_are_converted_once_and_per_call_values_must_need_none():
    engine = create_async_engine("postgresql+asyncpg://u@h/d")
    t = QueueTables().message
    stmt = (
        sa.update(t)
        .where(t.c.queue == sa.bindparam("q"))
        .values(state=MessageState.PROCESSING)  # an Enum: converted by its type
    )
    compiled = DriverStatement(stmt, engine.dialect, per_call=("q",))
    assert "PROCESSING" in compiled.arguments({"q": "x"})
    assert "x" in compiled.arguments({"q": "x"})
    with pytest.raises(TypeError, match="'state' needs conversion"):
        DriverStatement(
            sa.update(t).values(state=sa.bindparam("state", type_=t.c.state.type)),
            engine.dialect,
            per_call=("state",),
        )
    with pytest.raises(TypeError, match=r"no parameters named \['missing'\]"):
        DriverStatement(stmt, engine.dialect, per_call=("q", "missing"))


@pytest.mark.databases("postgresql")
async def test_a_killed_connection_is_dropped_and_the_retry_gets_a_fresh_one(pg_engine):
    driver = await prepared_driver(pg_engine)
    await driver.insert_committed(pg_engine, [plain_message()])
    async with driver_connection(pg_engine) as conn:
        doomed = conn.get_server_pid()
    admin = create_async_engine(str(pg_engine.url.render_as_string(hide_password=False)))
    async with admin.connect() as conn:
        await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": doomed})
    await admin.dispose()

    # the dead connection was dropped: the retry ran on a new backend
    assert len(await claim_after_losing_the_connection(driver, pg_engine, "q")) == 1
    async with driver_connection(pg_engine) as conn:
        assert conn.get_server_pid() != doomed


@pytest.mark.databases("postgresql")
async def test_driver_errors_come_out_as_sqlalchemys(pg_engine):
    """The classes SQLAlchemy's own asyncpg driver gives, with the driver's error (and
    its SQLSTATE) kept as `orig`; a live connection stays in the pool."""
    async with driver_connection(pg_engine) as conn:
        pid = conn.get_server_pid()
    with pytest.raises(sa.exc.ProgrammingError) as missing:
        async with driver_connection(pg_engine) as conn:
            await conn.execute("SELECT * FROM no_such_table")
    assert missing.value.orig.sqlstate == "42P01" and not missing.value.connection_invalidated
    with pytest.raises(sa.exc.IntegrityError):
        async with driver_connection(pg_engine) as conn:
            await conn.execute("INSERT INTO message (id) VALUES (NULL)")  # NOT NULL
    with pytest.raises(sa.exc.DBAPIError) as overflow:
        async with driver_connection(pg_engine) as conn:
            await conn.execute("SELECT 2147483647::int + 1")
    assert overflow.value.orig.sqlstate == "22003"
    with pytest.raises(TypeError):  # not the driver's: passed on as it is
        async with driver_connection(pg_engine) as conn:
            raise TypeError("ours")
    async with driver_connection(pg_engine) as conn:
        assert conn.get_server_pid() == pid  # none of these cost the connection


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):  # of integers: an array in text form
        return "'{" + ",".join(str(int(v)) for v in value) + "}'"
    assert isinstance(value, str)
    return "'" + value.replace("'", "''") + "'"


def _rows_produced(node: dict) -> int:
    """Rows every node of an analyzed JSON plan produced, counted once per loop."""
    own = int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1))
    return own + sum(_rows_produced(child) for child in node.get("Plans", []))


def _scans(node: dict) -> list[tuple[str, str]]:
    """(node type, relation) of every node of a JSON plan."""
    found = [(node.get("Node Type", ""), node.get("Relation Name", ""))]
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


@pytest.mark.databases("postgresql")
async def test_outcomes_and_leases_reach_their_rows_by_key_against_stale_statistics(pg_engine):
    """Statistics gathered while nothing was in flight say no message is claimed. Against
    them the outcome write took the whole table as its outer side and rescanned the
    outcome list for every row: 1,000 outcomes on a 1,000-row table cost 440 ms of server
    time, not 10. Every statement that matches rows to (id, token) pairs must do work in
    proportion to the pairs, under a custom plan and under a generic one: the rows all
    its plan nodes produce, each counted once per loop, stay within a small multiple of
    the pairs (the quadratic plan produced a million)."""
    driver = await prepared_driver(pg_engine)
    await driver.insert_committed(pg_engine, [plain_message() for _ in range(1000)])
    async with pg_engine.connect() as conn:
        await conn.execute(sa.text("ANALYZE message"))  # nothing claimed yet
        await conn.commit()
    claimed = await driver.claim(pg_engine, "q", 1000)
    assert len(claimed) == 1000

    def outcomes(state: MessageState) -> list[Outcome]:
        return [Outcome(m.id, m.token, state, 1, m.deliveries_count) for m in claimed]

    archive = driver._outcomes_statement(pg_engine, archives=True, requeues=False)
    requeue = driver._outcomes_statement(pg_engine, archives=False, requeues=True)
    lease = DriverStatement(driver._lease_sql(pg_engine), pg_engine.dialect, ("ids", "tokens"))
    statements = {
        "archive": (archive.sql, archive.arguments(
            outcome_parameters(outcomes(MessageState.COMPLETED)))),
        "requeue": (requeue.sql, requeue.arguments(
            outcome_parameters(outcomes(MessageState.PENDING)))),
        "lease": (lease.sql, lease.arguments(
            {"ids": [m.id for m in claimed], "tokens": [m.token for m in claimed]})),
    }
    async with driver_connection(pg_engine) as conn:
        for name, (sql, args) in statements.items():
            for mode in ("force_custom_plan", "force_generic_plan"):
                transaction = conn.transaction()
                await transaction.start()
                try:
                    await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                    await conn.execute(f"PREPARE planned AS {sql}")
                    values = ", ".join(_literal(a) for a in args)
                    plan = await conn.fetchval(  # runs it; the rollback undoes it
                        f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE planned({values})"
                    )
                    await conn.execute("DEALLOCATE planned")  # not undone by a rollback
                finally:
                    await transaction.rollback()
                if isinstance(plan, str):
                    plan = json.loads(plan)
                produced = _rows_produced(plan[0]["Plan"])
                assert produced <= 20 * len(claimed), (name, mode, produced)


@pytest.mark.databases("postgresql")
async def test_the_claim_keeps_to_indexes_under_a_generic_plan(pg_engine):
    """A prepared claim may run on a generic plan (`plan_cache_mode`, or PostgreSQL's own
    choice after five executions), where LIMIT is a parameter estimated at a tenth of
    the table. Written as a join, the claim then hash-joined over a scan of the whole
    message table (700 ms a claim with 1M queued); the `= ANY(ARRAY(...))` form stays
    on the keys."""
    driver = await prepared_driver(pg_engine)
    stmt = driver._claim_statement(pg_engine)  # the statement claim() runs
    assert stmt is not None
    args = stmt.arguments({"claim_queue": "generic-plan", "claim_limit": 10})
    async with driver_connection(pg_engine) as conn:
        # All in one transaction, rolled back: the rows and the statistics both go.
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(
                "INSERT INTO message (queue, payload, state, attempts_count, deliveries_count,"
                " created_at, next_attempt_at) SELECT 'generic-plan', '\\x00', 'PENDING', 0, 0,"
                " now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC'"
                " FROM generate_series(1, 200000)"  # 20,000 is small enough to scan anyway
            )
            await conn.execute("ANALYZE message")
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            # A server-side prepared statement, explained without running it (nothing is
            # claimed): EXPLAIN of the statement itself would plan it for these values.
            await conn.execute("PREPARE generic_claim AS " + stmt.sql)
            values = ", ".join(_literal(a) for a in args)  # EXECUTE takes no parameters
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE generic_claim({values})")
            await conn.execute("DEALLOCATE generic_claim")
        finally:
            await transaction.rollback()
    if isinstance(plan, str):  # without SQLAlchemy's json codec on the connection
        plan = json.loads(plan)

    found = _scans(plan[0]["Plan"])
    assert ("Index Scan", "message") in found
    assert ("Seq Scan", "message") not in found, found


def test_a_broken_socket_is_an_operational_error_but_a_timeout_is_left_alone():
    from faststream_sqla.drivers.postgresql._asyncpg import as_sqlalchemy_error

    reset = as_sqlalchemy_error(ConnectionResetError("peer"), lost=True)
    assert isinstance(reset, sa.exc.OperationalError) and reset.connection_invalidated
    late = TimeoutError()  # an OSError too, but no driver error: SQLAlchemy passes it on
    assert as_sqlalchemy_error(late, lost=False) is late
