"""What the MariaDB and SQLite watchers decide, without a database: how long they wait
between looks, which queues a look wakes, and which ids they keep looking for."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.drivers.base import WakeupHooks
from faststream_sqla.drivers.sqlite.driver import SQLiteDriver
from faststream_sqla.drivers.watch import LATE_COMMIT_PATIENCE, MOST_MISSING, Pace, Seen
from faststream_sqla.schema import QueueTables

PACE = Pace(shortest=0.005, longest=0.1, hold=1.0)


def test_looks_stay_quick_while_messages_arrive_then_back_off_to_the_longest():
    assert PACE.after(PACE.shortest, quiet_for=0.5) == PACE.shortest
    waits = [PACE.shortest]
    for _ in range(8):
        waits.append(PACE.after(waits[-1], quiet_for=2.0))
    assert waits == [0.005, 0.01, 0.02, 0.04, 0.08, 0.1, 0.1, 0.1, 0.1]


def test_a_look_that_wakes_someone_brings_the_quickest_pace_back_at_once():
    assert PACE.after(PACE.longest, quiet_for=0.0) == PACE.shortest


def test_a_look_wakes_the_queues_of_messages_still_to_claim_each_once_in_id_order():
    seen = Seen(10, late_commits=False)
    rows = [(11, "b", True), (12, "a", True), (13, "c", False), (14, "b", True)]
    assert seen.take(rows, now=0.0) == ["b", "a"]  # 13 is claimed already
    assert seen.newest == 14
    assert seen.take([], now=0.1) == []


def test_ids_skipped_below_the_newest_are_looked_for_until_they_turn_up():
    seen = Seen(10, late_commits=True)
    # 12 and 13: settled before the look, rolled back, or not committed yet
    assert seen.take([(11, "a", True), (14, "b", True)], now=0.0) == ["a", "b"]
    assert seen.missing == [12, 13]
    assert seen.take([(13, "c", True)], now=1.0) == ["c"]  # it committed late
    assert seen.missing == [12]
    assert seen.newest == 14


def test_missing_ids_are_given_up_after_the_patience():
    seen = Seen(10, late_commits=True)
    seen.take([(12, "a", True)], now=0.0)
    assert seen.missing == [11]
    seen.expire(now=LATE_COMMIT_PATIENCE)
    assert seen.missing == [11]
    seen.expire(now=LATE_COMMIT_PATIENCE + 0.001)
    assert seen.missing == []


def test_only_the_newest_missing_ids_are_kept():
    seen = Seen(0, late_commits=True)
    # a look after a long run of settled messages: only the newest gaps are noted,
    # and counting them does not walk the whole range
    seen.take([(1_000_000_000, "a", True)], now=0.0)
    assert seen.missing == list(range(1_000_000_000 - MOST_MISSING, 1_000_000_000))
    seen.take([(1_000_000_010, "a", True)], now=1.0)
    assert len(seen.missing) == MOST_MISSING
    assert max(seen.missing) == 1_000_000_009
    assert min(seen.missing) == 1_000_000_010 - MOST_MISSING - 1


def test_where_ids_commit_in_order_no_id_is_looked_for_again():
    seen = Seen(10, late_commits=False)
    seen.take([(11, "a", True), (14, "b", True)], now=0.0)
    assert seen.missing == []


def test_an_in_memory_sqlite_database_has_no_watcher():
    for url in ("sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:"):
        engine = create_async_engine(url)
        driver = SQLiteDriver(QueueTables())
        assert driver.listener(engine, WakeupHooks(lambda _q: None, lambda: None, print)) is None
