"""docs/observability.md's application with the queue-state collector, run the way a
user runs it: its block as written, in a module of its own, under `faststream run`
with a broker built from a URL (not connected at import); on every database."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from faststream_sqla import SqlaBroker

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
#: a guard against a process that never ends, not a synchronisation
EXIT_TIMEOUT = 120

BEFORE = """
import os
from faststream_sqla import SqlaBroker

broker = SqlaBroker(os.environ["APP_URL"])
"""
# after the page's hooks: show what a scrape would, then stop as Ctrl+C would
AFTER = """

from prometheus_client import generate_latest as _generate_latest


@app.after_startup
async def _scrape_once_and_exit() -> None:
    print(_generate_latest(registry).decode(), flush=True)
    app.exit()
"""


def collector_app_block() -> str:
    page = (ROOT / "docs" / "observability.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    (block,) = [b for b in blocks if "QueueStateCollector(" in b and "FastStream(broker)" in b]
    return block


async def test_the_collector_app_of_the_page_runs_under_faststream_run(database_url, tmp_path):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("hello", queue="emails")
    (tmp_path / "metrics_app.py").write_text(BEFORE + collector_app_block() + AFTER)
    done = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / "faststream"), "run", "metrics_app:app"],
        cwd=tmp_path,
        env={**os.environ, "APP_URL": database_url},
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "IncorrectState" not in output and "Traceback" not in output, output
    assert 'faststream_sqla_queue_depth{queue="emails",state="ready"} 1.0' in done.stdout
