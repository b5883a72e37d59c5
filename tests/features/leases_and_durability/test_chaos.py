"""The short form of the chaos runs in chaos/: real worker processes,
killed with SIGKILL mid-drain, on every database."""

from __future__ import annotations

import pytest

from chaos.kill_workers import HELD_PER_PROCESS, run_kill_workers
from chaos.soak import run_soak

from tests.conftest import on_servers

pytestmark = pytest.mark.slow


async def test_sigkilled_workers_lose_nothing_and_leave_nothing_stuck(database_url, tmp_path):
    report = await run_kill_workers(
        database_url, messages=3000, workers=3, kill_at=(0.2, 0.45, 0.7), log_dir=tmp_path,
        timeout=240,
    )
    assert report.kills == 3
    assert (report.completed, report.lost, report.stuck) == (3000, 0, 0), report
    assert report.other_states == {}, report
    # only messages in flight at a kill may run twice
    assert report.duplicates <= report.kills * HELD_PER_PROCESS, report


#: what one cut may log per worker process: a failure of each handler whose own
#: connection was cut (4 run at once), and the listener's lost connection and retry
LINES_PER_CUT_AND_WORKER = 4 + 2


@pytest.mark.parametrize("server", on_servers())
async def test_connections_cut_by_the_server_lose_nothing_and_log_little(
    server, server_databases, tmp_path
):
    report = await run_kill_workers(
        server_databases[server], messages=3000, workers=3, kill_at=(0.2, 0.45, 0.7),
        disrupt="connections", log_dir=tmp_path, timeout=240,
    )
    assert report.kills == 3
    assert (report.completed, report.lost, report.stuck) == (3000, 0, 0), report
    assert report.other_states == {}, report
    assert report.duplicates <= report.kills * HELD_PER_PROCESS, report
    # a line or two per event and process, not a traceback per message or per retry
    assert report.log_lines <= report.kills * report.workers * LINES_PER_CUT_AND_WORKER, report


async def test_a_short_soak_reports_each_interval_and_handles_everything(database_url):
    report = await run_soak(database_url, seconds=2.0, rate=500, interval=0.5)
    assert report.ok, report
    assert report.published == 1000
    assert len(report.samples) >= 4  # one per interval, and one once drained
    last = report.samples[-1]
    assert (last.handled, last.queued, last.archived) == (1000, 0, 1000)
    assert last.table_mib is not None and last.table_mib > 0
    assert (last.dead_tuples is not None) == (report.database == "postgresql")
