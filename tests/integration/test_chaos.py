"""The short form of the chaos runs in chaos/ (issue 20): real worker processes,
killed with SIGKILL mid-drain, on every database."""

from __future__ import annotations

import pytest

from chaos.kill_workers import HELD_PER_PROCESS, run_kill_workers

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
