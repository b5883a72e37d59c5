"""A worker that dies shows as gone once silent past its timeout, one that stops
gracefully leaves no row, and one that loses its database keeps its row quietly and
refreshes it once the database is back."""

from __future__ import annotations

import signal
import sys

from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.admin.models import WorkerInfo

from tests.support.helpers import FAST, CuttableDatabase, captured_logger, wait_until
from tests.support.processes import WORKERS, exit_code, read_line, spawn


async def _worker(admin: QueueAdmin, worker_id: str) -> WorkerInfo | None:
    return next((w for w in await admin.workers() if w.worker_id == worker_id), None)


async def test_a_killed_worker_shows_as_gone_after_its_timeout(database_url, tmp_path):
    log = tmp_path / "worker.log"
    async with QueueAdmin(database_url) as admin, spawn(
        sys.executable, WORKERS / "registered.py", database_url, log=log
    ) as proc:
        worker_id = (await read_line(proc, log)).removeprefix("WORKER ")
        listed = await _worker(admin, worker_id)
        assert listed is not None and listed.status == "alive" and listed.pid == proc.pid
        assert listed.queues == ["jobs"]

        proc.send_signal(signal.SIGKILL)
        assert await exit_code(proc) == -signal.SIGKILL

        async def gone() -> bool:
            found = await _worker(admin, worker_id)
            assert found is not None  # a killed process deletes nothing
            return found.status == "gone"

        await wait_until(gone)
        found = await _worker(admin, worker_id)
        assert found is not None and found.silent_for > found.gone_after
        # still listed, and judged again by a longer silence on request
        assert (await admin.workers(gone_after=3600))[0].status == "alive"


async def test_a_worker_stopped_gracefully_leaves_no_row(database_url, tmp_path):
    log = tmp_path / "worker.log"
    async with QueueAdmin(database_url) as admin, spawn(
        sys.executable, WORKERS / "registered.py", database_url, log=log
    ) as proc:
        worker_id = (await read_line(proc, log)).removeprefix("WORKER ")
        assert await _worker(admin, worker_id) is not None
        proc.send_signal(signal.SIGTERM)
        assert await exit_code(proc) == 0, log.read_text()
        assert await admin.workers() == []


async def test_the_row_outlives_a_database_outage_without_log_lines_of_its_own(
    database_url, dialect_name, tmp_path
):
    database = CuttableDatabase(database_url, dialect_name, tmp_path)
    await database.start()
    logger, log = captured_logger(f"test.workers.outage.{dialect_name}")
    broker = SqlaBroker(database.url, logger=logger)

    @broker.subscriber("jobs", release_stuck_timeout=3.0, **FAST)
    async def handle(body: str) -> None:
        pass

    registry, health = broker.config.workers, broker.config.health
    async with QueueAdmin(database.direct_url) as admin, broker:
        await broker.start()
        assert registry.identity is not None
        worker_id = registry.identity.worker_id
        before = await _worker(admin, worker_id)
        assert before is not None
        await database.cut(broker.engine)

        async def refreshes_failed() -> bool:
            return health.is_down and registry.failures >= 2

        await wait_until(refreshes_failed)
        await database.restore()

        async def refreshed_again() -> bool:
            found = await _worker(admin, worker_id)
            return found is not None and found.last_seen > before.last_seen and not health.is_down

        await wait_until(refreshed_again)
        found = await _worker(admin, worker_id)
        assert found is not None and found.status == "alive"
        assert found.started_at == before.started_at  # the same row, not a new one
    assert not log.containing("workers table")
    assert len(log.containing("lost the database")) == 1
