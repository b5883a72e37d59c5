"""A PostgreSQL primary killed mid-drain and its streaming standby promoted: worker
processes and a publisher on a multi-host URL carry on by themselves, and every
message is accounted for (chaos/failover.py runs it; its long form prints a table).

PostgreSQL only: this is about PostgreSQL's streaming standby and asyncpg's
`target_session_attrs`; MariaDB's replicas are promoted by their operator, not here.
"""

from __future__ import annotations

import pytest

from chaos.failover import CLAIM_LOST, OUTCOME_LOST, UNEXPLAINED, run_failover

pytestmark = [pytest.mark.slow, pytest.mark.databases("postgresql")]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_failover_to_the_standby_loses_no_acknowledged_message_and_leaves_none_stuck(
    mode, tmp_path
):
    report = await run_failover(
        mode, log_dir=tmp_path, backlog=1500, promote_after=1.0, publish_after=2.0,
        # longer than the run: only the release after the outage may free a message
        # whose outcome the new primary lost
        release_stuck_timeout=120.0, settle=60.0,
    )
    assert report.restarts == 0, report  # recovered without a process restart
    assert report.stuck == 0, report
    assert report.first_publish_after_promotion is not None, report
    assert not report.causes.get(UNEXPLAINED), report  # every duplicate explained
    assert set(report.causes) <= {CLAIM_LOST, OUTCOME_LOST}, report
    if mode == "sync":
        # an acknowledged publish, claim or outcome is on the standby before it returns
        assert report.lost == 0, report
        assert report.duplicates == 0, report
    # each worker logged the outage once and its end once, and nothing else for it
    assert all(lines >= 1 for lines in report.outage_lines), report
    assert report.outage_lines == report.recovery_lines, report
    assert report.listener_failures == 0, report
    assert report.tracebacks == 0, report
