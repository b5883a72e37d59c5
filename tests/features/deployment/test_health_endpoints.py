"""The liveness and readiness routes of docs/production.md's service, over real HTTP
to a real server on 127.0.0.1: readiness turns false while the network to the
database is cut and true again once it is back; liveness stays true throughout."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import uvicorn

from chaos.servers import free_port

from tests.support.helpers import CuttableDatabase
from tests.support.production_page import write_service

LIVE, READY = "/health/live", "/health/ready"
#: how long a route may take to show a change (a readiness probe waits up to 5 s)
DEADLINE = 60.0


def _import_service(directory: Path, name: str) -> ModuleType:
    """The page's service.py, imported as `faststream run` imports it."""
    spec = importlib.util.spec_from_file_location(name, write_service(directory))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def until_status(http: httpx.AsyncClient, route: str, status: int) -> None:
    """Ask `route` until it answers `status` (polling: no event announces a change)."""
    deadline = asyncio.get_running_loop().time() + DEADLINE
    seen: object = None
    while True:
        try:
            seen = (await http.get(route)).status_code
        except httpx.TransportError as exc:  # the server is not listening yet
            seen = exc
        if seen == status:
            return
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{route} did not answer {status} within {DEADLINE}s; last: {seen!r}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def served(
    database_url: str, dialect_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ModuleType, CuttableDatabase, httpx.AsyncClient]]:
    """The page's service, its database behind a link the test can cut, served by
    uvicorn on a free port as `faststream run` serves it."""
    database = CuttableDatabase(database_url, dialect_name, tmp_path)
    await database.start()
    monkeypatch.setenv("FASTSTREAM_SQLA_URL", database.url.render_as_string(hide_password=False))
    code = tmp_path / "code"
    code.mkdir()
    name = f"service_{dialect_name}"
    service = _import_service(code, name)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(service.app, host="127.0.0.1", port=port, lifespan="on", log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE
        ) as http:
            yield service, database, http
    finally:
        if database.proxy is not None and database.proxy.server is not None:
            if not database.proxy.server.is_serving():
                await database.restore()  # so the broker can stop cleanly
        server.should_exit = True
        await serving
        sys.modules.pop(name, None)


async def test_readiness_is_false_while_the_database_is_cut_and_true_after(served):
    service, database, http = served
    await until_status(http, LIVE, 204)
    await until_status(http, READY, 204)

    await database.cut(service.broker.engine)
    await until_status(http, READY, 500)
    assert (await http.get(LIVE)).status_code == 204  # no restart for an outage

    await database.restore()
    await until_status(http, READY, 204)
    assert (await http.get(LIVE)).status_code == 204

