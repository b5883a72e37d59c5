"""docs/production.md's configuration runs as shown: the Kubernetes manifests parse and
agree with the service and with the page's shutdown arithmetic, and the commands of the
Job, the Deployment, the image and the systemd unit are the real command line: the
migration succeeds, and the service starts, answers its probes, handles messages and
stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chaos.servers import free_port
from faststream_sqla import MessageState, SqlaBroker

from tests.support.helpers import rows, wait_until
from tests.support.production_page import block, blocks, write_service
from tests.features.deployment.test_health_endpoints import LIVE, READY, _import_service, until_status

BIN = Path(sys.executable).parent
#: the stop that the page promises: a claim in flight (5 s), then graceful_timeout for
#: running handlers and up to graceful_timeout more for the last outcomes
CLAIM_IN_FLIGHT = 5


def manifests() -> dict[str, dict[str, Any]]:
    (text,) = blocks("yaml")
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def container(kind: str) -> dict[str, Any]:
    (found,) = manifests()[kind]["spec"]["template"]["spec"]["containers"]
    return found


def unit() -> dict[str, str]:
    """The systemd unit's settings (one value per key)."""
    text = block("ini", "# /etc/systemd/system/orders.service")
    return dict(
        line.split("=", 1) for line in text.splitlines() if re.match(r"^[A-Za-z]+=", line)
    )


def dockerfile_command() -> list[str]:
    (text,) = blocks("dockerfile")
    (cmd,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    return json.loads(cmd[len("CMD ") :])


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTSTREAM_SQLA_URL", f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")
    module = _import_service(tmp_path, "service_page_settings")
    yield module
    sys.modules.pop("service_page_settings", None)


def test_the_manifests_probe_the_services_routes_and_outlast_its_shutdown(service):
    job, deployment = container("Job"), container("Deployment")
    assert job["command"] == ["faststream-sqla", "db", "upgrade"]
    assert deployment["command"] == dockerfile_command()
    assert deployment["command"][:3] == ["faststream", "run", "service:app"]

    routes = {path for path, _ in service.app.routes}
    assert deployment["livenessProbe"]["httpGet"]["path"] == LIVE
    assert deployment["readinessProbe"]["httpGet"]["path"] == READY
    assert {LIVE, READY} <= routes
    port = deployment["command"][deployment["command"].index("--port") + 1]
    assert deployment["ports"][0]["containerPort"] == int(port)
    # the probe waits longer than the readiness check's own timeout (5 s in service.py)
    assert deployment["readinessProbe"]["timeoutSeconds"] > 5

    graceful = service.broker.config.graceful_timeout
    longest_stop = CLAIM_IN_FLIGHT + 2 * graceful
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > longest_stop
    assert int(unit()["TimeoutStopSec"]) > longest_stop
    (subscriber,) = service.broker.subscribers
    assert subscriber.options.handler_timeout <= graceful  # started handlers finish


def test_the_unit_and_the_image_run_the_deployments_command():
    exec_start = shlex.split(unit()["ExecStart"])
    assert Path(exec_start[0]).name == "faststream"
    deployment = container("Deployment")["command"]
    assert exec_start[1:3] == deployment[1:3]
    assert unit()["KillSignal"] == "SIGTERM"


def _runnable(source: str, port: int) -> list[str]:
    """The page's command with this venv's scripts, and a free port on 127.0.0.1."""
    if source == "kubernetes":
        argv = list(container("Deployment")["command"])
    else:
        argv = shlex.split(unit()["ExecStart"])
    argv[0] = str(BIN / Path(argv[0]).name)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    return argv


@pytest.mark.parametrize("source", ["kubernetes", "systemd"])
async def test_the_pages_commands_migrate_and_run_the_service(
    source, database_url, engine, tables, tmp_path
):
    # the migration Job's command, against a database already at the head: a no-op
    (migrate, *args) = container("Job")["command"]
    migrated = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / migrate), *args],
        env={**os.environ, "FASTSTREAM_SQLA_URL": database_url},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr[-2000:]

    write_service(tmp_path)
    port = free_port()
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *_runnable(source, port),
            cwd=tmp_path,
            env={**os.environ, "FASTSTREAM_SQLA_URL": database_url},
            stdout=out,
            stderr=out,
            start_new_session=True,  # a process group of its own, as a unit's cgroup
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                await until_status(http, LIVE, 204)
                await until_status(http, READY, 204)
            async with SqlaBroker(database_url) as producer:
                await producer.publish_batch(*({"order": n} for n in range(5)), queue="orders")

            async def all_completed() -> bool:
                done = await rows(engine, tables.archive)
                return [r["state"] for r in done] == [MessageState.COMPLETED] * 5

            await wait_until(all_completed, timeout=60)
            if source == "systemd":  # systemd signals every process of the unit
                os.killpg(proc.pid, signal.SIGTERM)
            else:  # Kubernetes signals the container's first process
                proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 60)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this test started
                await proc.wait()
    output = log.read_text()
    # One process re-raises SIGTERM once it has shut down (uvicorn's way: status 143 in
    # a shell); the parent of --workers exits 0 when its workers have.
    assert code == (0 if "--workers" in _runnable(source, port) else -signal.SIGTERM), output
    assert "FastStream app shut down gracefully." in output, output[-3000:]
    assert await rows(engine, tables.message) == []

