"""`faststream-sqla dashboard` as a shell runs it: it refuses to listen beyond
loopback without auth (one line, no traceback, the URL's password masked), and serves
the API on a loopback address, under a base path and behind a token when asked."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import httpx
from sqlalchemy.engine import make_url

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.dashboard.server import served_app

from tests.support.helpers import SCRIPT, run_script

TOKEN = "a-token-long-enough-to-count"
#: how long a server may take to say it listens
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_it_refuses_a_public_address_without_auth(database_url):
    url = make_url(database_url)
    if url.host:  # a password that must not be shown
        url = url.set(password="hunter2-secret")
    done = await run_script(
        url.render_as_string(hide_password=False), "dashboard", "--host", "0.0.0.0",
        "--port", str(free_port()),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "will not listen on '0.0.0.0' without auth" in lines[0], lines
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr + done.stdout


async def _serving(log: Path, output: asyncio.StreamReader) -> None:
    """Until uvicorn says it listens."""
    while True:
        line = await output.readline()
        assert line, f"the dashboard exited:\n{log.read_text()}"
        log.write_bytes(log.read_bytes() + line)
        if b"Uvicorn running on" in line:
            return


async def _serve(database_url: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    port = free_port()
    log = tmp_path / "dashboard.log"
    log.write_bytes(b"")
    argv = (SCRIPT, "dashboard", "--url", database_url, "--port", str(port), *args)
    proc = await asyncio.create_subprocess_exec(
        *map(str, argv),
        # uvicorn's access log goes to stdout, the rest to stderr: both read here
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    try:
        await asyncio.wait_for(_serving(log, proc.stdout), START_TIMEOUT)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc, port


async def _stop(proc: asyncio.subprocess.Process) -> str:
    """Stop the server; what it wrote since it said it listens."""
    proc.terminate()
    assert proc.stdout is not None
    rest = await asyncio.wait_for(proc.stdout.read(), START_TIMEOUT)
    await asyncio.wait_for(proc.wait(), START_TIMEOUT)
    return rest.decode()


async def test_it_serves_the_api_on_loopback(database_url, tmp_path):
    proc, port = await _serve(database_url, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            answer = await http.get("/api/queues")
            assert answer.status_code == 200 and answer.json() == {"queues": [], "replica": None}
            assert (await http.get("/api/openapi.json")).json()["info"]["title"]
    finally:
        await _stop(proc)


async def test_it_serves_under_a_base_path_behind_a_token(database_url, tmp_path):
    env = {"FASTSTREAM_SQLA_DASHBOARD_TOKEN": TOKEN}
    proc, port = await _serve(database_url, tmp_path, "--base-path", "/queues", env=env)
    logged = ""
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/queues") as http:
            assert (await http.get("/api/queues")).status_code == 403
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            answer = await http.get("/api/queues", headers=bearer)
            assert answer.status_code == 200 and answer.json() == {"queues": [], "replica": None}
    finally:
        logged = await _stop(proc)
    assert "GET /queues/api/queues" in logged  # the access log, which names no token
    assert TOKEN not in (tmp_path / "dashboard.log").read_text() + logged


async def test_it_reads_from_the_read_url_and_shows_its_lag(database_url, dialect_name, tmp_path):
    # the database itself as its own replica: 0 behind on a server, unknown on SQLite
    proc, port = await _serve(database_url, tmp_path, "--read-url", database_url)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            info = (await http.get("/api/info")).json()
    finally:
        await _stop(proc)
    assert info["replica"]["lag_seconds"] == (None if dialect_name == "sqlite" else 0.0)
    assert info["replica"]["text"].startswith("read from replica, ")


async def test_it_refuses_a_read_url_of_another_kind_of_database_in_one_line(database_url):
    other = "sqlite+aiosqlite:///x.db" if "sqlite" not in database_url else "mysql+asyncmy://u@h/d"
    done = await run_script(
        database_url, "dashboard", "--read-url", other, "--port", str(free_port())
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "same kind of database" in lines[0], lines


async def test_it_refuses_a_read_timeout_out_of_bounds_in_one_line(database_url):
    done = await run_script(
        database_url, "dashboard", "--read-timeout", "0.01", "--port", str(free_port())
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "read_timeout must be a number of seconds" in lines[0], lines


async def test_the_app_it_serves_closes_the_engines_it_made_when_the_server_stops(database_url):
    # the app `faststream-sqla dashboard` hands uvicorn, run as uvicorn runs it: its
    # lifespan around the requests
    admin = QueueAdmin(database_url, read_url=database_url)
    served = served_app(admin, read_only=False, auth=None, base_path="/queues")
    async with served.router.lifespan_context(served):
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            answer = await http.get("/queues/api/queues")
            assert answer.status_code == 200, answer.text
            assert (await http.post("/queues/api/queues/q/pause")).status_code == 200
        pools = [admin.engine.pool, admin.read_engine.pool]
        assert all(pool.checkedin() > 0 for pool in pools)
    assert all(pool.checkedin() == 0 for pool in pools)
    assert admin.engine.pool is not pools[0] and admin.read_engine.pool is not pools[1]
