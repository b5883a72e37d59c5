"""The admin API's queue figures read index ranges of the message table, never the
whole table, whatever mix of plain, channelled, delayed, waiting and in-flight messages
a queue holds. Each statement `QueueAdmin.queues()` and a purge run is asked
for its plan: PostgreSQL with sequential scans priced out (so a plan that still has
one had no index to use), SQLite's query plan, MariaDB's join types (ALL: every row)."""

from __future__ import annotations

import json

import sqlalchemy as sa

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.admin import QueueAdmin


async def _statements_of(engine, call) -> list[tuple[str, object]]:
    """The SELECTs of the message table that `call()` runs, with their parameters."""
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("SELECT", "WITH")) and "message" in statement:
            seen.append((statement, parameters))

    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        await call()
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", record)
    return seen


def _whole_table_reads_postgresql(plan: list[dict]) -> list[str]:
    def walk(node: dict) -> list[str]:
        own = [node["Relation Name"]] if node["Node Type"] == "Seq Scan" else []
        return own + [name for child in node.get("Plans", []) for name in walk(child)]

    return walk(plan[0]["Plan"])


async def test_queue_figures_read_index_ranges_only(database_url, engine, dialect_name):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(
            "plain",
            Envelope("channelled", channel="tenant-a"),
            Envelope("later", delay=3600),
            Envelope("later, channelled", delay=3600, channel="tenant-b"),
            Envelope("head", ordering_key="k"),
            Envelope("behind", ordering_key="k"),
            Envelope("urgent", priority=5),
            queue="q",
        )
    async with QueueAdmin(engine) as admin:
        await admin.queues()  # the schema check's own reads, once
        statements = await _statements_of(engine, admin.queues)
        statements += await _statements_of(engine, lambda: admin.queues(["q"]))
        statements += await _statements_of(engine, lambda: admin.purge("q"))
    assert statements
    full_reads = []
    async with engine.connect() as conn:
        if dialect_name == "postgresql":
            await conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, parameters in statements:
            if dialect_name == "postgresql":
                explain = f"EXPLAIN (FORMAT JSON) {statement}"
                plan = (await conn.exec_driver_sql(explain, parameters)).scalar()
                plan = json.loads(plan) if isinstance(plan, str) else plan
                read_whole = _whole_table_reads_postgresql(plan)
            elif dialect_name == "mysql":
                result = await conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
                plan = [dict(row._mapping) for row in result]
                ours = {"message", "message_archive", "message_keys"}
                read_whole = [r["table"] for r in plan if r["type"] == "ALL" and r["table"] in ours]
            else:
                explain = f"EXPLAIN QUERY PLAN {statement}"
                details = [row[-1] for row in await conn.exec_driver_sql(explain, parameters)]
                # "SCAN message" reads the table; "SEARCH ... USING INDEX" a range
                read_whole = [d for d in details if d.startswith("SCAN message")]
            if read_whole:
                full_reads.append((statement, read_whole))
    assert full_reads == [], "\n\n".join(f"{plan}\n{sql}" for sql, plan in full_reads)
