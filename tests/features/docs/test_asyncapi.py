"""AsyncAPI: every queue is a channel, with operations and payload schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from faststream.specification import AsyncAPI
from faststream_sqla import SqlaBroker, SqlaRouter

REPO = Path(__file__).resolve().parents[3]


class Order(BaseModel):
    id: int
    item: str
    quantity: int


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        node = schema
        for part in path:
            node = node[part]
    return node


def operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(address, action) -> the payload schema of the operation's message (AsyncAPI 3)."""
    result = {}
    for op in schema["operations"].values():
        channel = resolve(schema, op["channel"])
        [message] = op["messages"]
        payload = resolve(schema, resolve(schema, message)["payload"])
        result[(channel["address"], op["action"])] = payload
    return result


@pytest.fixture
def broker(tmp_path: Path) -> SqlaBroker:
    broker = SqlaBroker(f"sqlite+aiosqlite:///{tmp_path}/never-created.db")
    router = SqlaRouter(prefix="svc.")

    @router.subscriber(["alpha", "beta"])
    async def multi(body: str) -> None: ...

    @router.subscriber("orders")
    @router.publisher("shipments")
    async def orders(order: Order) -> dict:
        return {}

    @broker.subscriber("plain")
    async def plain(body: int) -> None: ...

    broker.include_router(router)
    return broker


def test_asyncapi_3_channels_operations_payloads(broker: SqlaBroker, tmp_path: Path) -> None:
    schema = AsyncAPI(broker).to_specification().to_jsonable()
    assert schema["asyncapi"].startswith("3.")
    addresses = sorted(c["address"] for c in schema["channels"].values())
    assert addresses == ["plain", "svc.alpha", "svc.beta", "svc.orders", "svc.shipments"]
    assert schema["servers"]["development"]["protocol"] == "sqlite"

    ops = operations(schema)
    assert set(ops) == {
        ("svc.alpha", "receive"),
        ("svc.beta", "receive"),
        ("svc.orders", "receive"),
        ("plain", "receive"),
        ("svc.shipments", "send"),
    }
    assert ops[("svc.alpha", "receive")]["type"] == "string"
    assert ops[("svc.beta", "receive")]["type"] == "string"
    assert ops[("plain", "receive")]["type"] == "integer"
    order = ops[("svc.orders", "receive")]
    assert set(order["properties"]) == {"id", "item", "quantity"}
    assert order["properties"]["quantity"]["type"] == "integer"
    assert set(order["required"]) == {"id", "item", "quantity"}
    assert ops[("svc.shipments", "send")]["type"] == "object"
    assert not (tmp_path / "never-created.db").exists()


def test_asyncapi_2_publish_subscribe(broker: SqlaBroker) -> None:
    schema = AsyncAPI(broker, schema_version="2.6.0").to_specification().to_jsonable()
    by_kind: dict[str, set[str]] = {"publish": set(), "subscribe": set()}
    for name, channel in schema["channels"].items():
        for kind in by_kind:
            if kind in channel:
                by_kind[kind].add(name.split(":")[0])
                message = resolve(schema, channel[kind]["message"])
                assert resolve(schema, message["payload"])
    # AsyncAPI 2: the app *consumes* what clients publish, and vice versa
    assert by_kind["publish"] == {"plain", "svc.alpha", "svc.beta", "svc.orders"}
    assert by_kind["subscribe"] == {"svc.shipments"}
    assert set(schema["components"]["schemas"]["Order"]["properties"]) == {
        "id",
        "item",
        "quantity",
    }


def test_excluded_from_schema(tmp_path: Path) -> None:
    broker = SqlaBroker(f"sqlite+aiosqlite:///{tmp_path}/x.db")

    @broker.subscriber("hidden", include_in_schema=False)
    async def hidden(body: str) -> None: ...

    @broker.subscriber("shown", title="Shown", description="visible queue")
    async def shown(body: str) -> None: ...

    schema = AsyncAPI(broker).to_specification().to_jsonable()
    channels = list(schema["channels"].values())
    assert [c["address"] for c in channels] == ["shown"]
    assert channels[0].get("description") == "visible queue"


def test_cli_docs_gen_example_app(tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.json"
    faststream = Path(sys.executable).parent / "faststream"
    env = {**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/example.db"}
    proc = subprocess.run(
        [str(faststream), "docs", "gen", "examples.app:app", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    schema = json.loads(out.read_text())
    ops = operations(schema)
    assert set(ops) == {("orders", "receive"), ("shipments", "receive"), ("shipments", "send")}
    assert set(ops[("orders", "receive")]["properties"]) == {"id", "item", "quantity"}
    assert ops[("shipments", "receive")]["type"] == "object"
    assert ops[("shipments", "send")]["type"] == "object"
    assert not (tmp_path / "example.db").exists()
