"""Every ```python block of README.md and docs/*.md runs, one test per block (the
files in examples/ are apps, run by
tests/features/leases_and_durability/test_worker_processes.py; a test below keeps that
true).

The convention, which every block follows:

- A block runs as a module body in which top-level ``await`` is allowed, and the
  test awaits it. Functions and handlers it defines are registered, not called.
- The working directory is a fresh temporary directory whose ``app.db`` holds the queue
  tables, so ``sqlite+aiosqlite:///app.db`` works as the docs use it, and
  ``FASTSTREAM_SQLA_URL`` names that database.
- A block can use these names without defining them:
    ``url``      ``"sqlite+aiosqlite:///app.db"``
    ``broker``   a connected ``SqlaBroker(url)``
    ``engine``   ``broker.engine``
    ``session``  an ``AsyncSession`` on ``engine``, no transaction begun
    ``order``    an unsaved row of a small ORM model (table ``orders``), the
                 "business row" of the outbox examples
  Anything else a block uses, it defines or imports itself.
- A block whose first line is ``# name.py`` is also a file: before a page's block runs,
  each such block of that page is written to the working directory, so one block can
  import another (``from app import Order``).
- A block that is not Python is fenced with its own language (``bash``, ``text``,
  ``sql``) and is not run. There is no way to skip a ```python block; NOT_CODE below
  is for a listing that cannot be relabelled yet (empty today).

A block that names a PostgreSQL or MariaDB URL only builds a broker or engine from it,
which does not connect; anything that talks to a database uses SQLite.
"""

from __future__ import annotations

import ast
import json
import asyncio
import inspect
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from faststream_sqla import SqlaBroker, upgrade_schema

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
URL = "sqlite+aiosqlite:///app.db"
BLOCK_TIMEOUT = 30.0
MODULE = "doc_example"

# Listings fenced as python that are not code, in pages someone else is editing; each
# should become a ```text block, and then its entry goes (a test below says when).
NOT_CODE: set[tuple[str, str]] = set()

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)")
_FILE_NAME = re.compile(r"^#\s*(?P<name>[A-Za-z_][\w.-]*\.py)\b")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, e.g. "docs/index.md"
    line: int  # of the opening fence, 1-based
    lang: str
    source: str

    @property
    def file_name(self) -> str | None:
        first = self.source.lstrip("\n").split("\n", 1)[0]
        m = _FILE_NAME.match(first)
        return m["name"] if m else None

    @property
    def first_line(self) -> str:
        return self.source.strip().split("\n", 1)[0].strip()


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, indented ones (in lists) included."""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : end]]
        blocks.append(Block(page, i + 1, m["lang"].lower(), "\n".join(body) + "\n"))
        i = end + 1
    return blocks


def python_blocks() -> list[Block]:
    return [
        b
        for path in PAGES
        for b in fenced_blocks(path)
        if b.lang in ("python", "py") and (b.page, b.first_line) not in NOT_CODE
    ]


BLOCKS = python_blocks()


class _Base(DeclarativeBase):
    pass


class _Order(_Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(sa.String(100))


async def _prepare(namespace: dict[str, Any], shared: list[Any]) -> None:
    """Fill the block's namespace; `shared` collects what to close afterwards, since the
    block may rebind the names."""
    await upgrade_schema(URL)
    broker = SqlaBroker(URL)
    shared.append(broker)
    await broker.connect()
    async with broker.engine.begin() as conn:
        await conn.run_sync(_Base.metadata.create_all)
    session = AsyncSession(broker.engine)
    shared.append(session)
    namespace.update(
        url=URL, broker=broker, engine=broker.engine, session=session, order=_Order(item="widget")
    )


async def _close(shared: list[Any]) -> None:
    for thing in reversed(shared):  # the session before the broker's engine goes
        await (thing.close() if isinstance(thing, AsyncSession) else thing.stop())


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    # As asyncio.run() does: nothing a block left running outlives its test.
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()

    async def cancelled() -> None:
        await asyncio.gather(*tasks, return_exceptions=True)

    loop.run_until_complete(cancelled())
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def _write_page_files(block: Block, directory: Path) -> list[str]:
    """Write the page's `# name.py` blocks as files; return their module names."""
    modules = []
    for other in fenced_blocks(ROOT / block.page):
        if other.lang in ("python", "py") and other.file_name:
            (directory / other.file_name).write_text(other.source, encoding="utf-8")
            modules.append(other.file_name[: -len(".py")])
    return modules


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_doc_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FASTSTREAM_SQLA_URL", URL)
    modules = _write_page_files(block, tmp_path)
    for name in modules:  # a module of that name from another test's directory
        sys.modules.pop(name, None)

    # dont_inherit: this file's `from __future__ import annotations` is not the block's
    code = compile(
        block.source,
        f"{block.page}:{block.line}",
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        dont_inherit=True,
    )
    # A real module, as libraries that resolve annotations by module name expect.
    module = types.ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)
    namespace: dict[str, Any] = module.__dict__
    # The test drives its own loop, so that between awaits no loop is running and a
    # block that is a whole script may call asyncio.run() itself.
    loop = asyncio.new_event_loop()
    shared: list[Any] = []
    try:
        loop.run_until_complete(_prepare(namespace, shared))
        result = eval(code, namespace)  # noqa: S307 - our own documentation
        if code.co_flags & inspect.CO_COROUTINE:
            loop.run_until_complete(asyncio.wait_for(result, BLOCK_TIMEOUT))
    finally:
        try:
            loop.run_until_complete(_close(shared))
        finally:
            _close_loop(loop)
            for name in modules:
                sys.modules.pop(name, None)


def test_the_block_finder_misses_no_python_fence() -> None:
    # The parametrization above is only as good as the finder: count the fences plainly.
    for path in PAGES:
        fences = sum(
            ln.strip() in ("```python", "```py") for ln in path.read_text("utf-8").splitlines()
        )
        found = [b for b in fenced_blocks(path) if b.lang in ("python", "py")]
        assert len(found) == fences, path.name


def test_not_code_entries_still_match_a_block() -> None:
    fenced = {
        (b.page, b.first_line)
        for path in PAGES
        for b in fenced_blocks(path)
        if b.lang in ("python", "py")
    }
    stale = NOT_CODE - fenced
    assert not stale, f"no longer fenced as python; remove from NOT_CODE: {stale}"


# -- the outbox examples publish the id the order got --------------------------------------
# the blocks that use the shared `session` and `order` (others build their own)
OUTBOX_BLOCKS = [
    b for b in BLOCKS
    if "session.add(order)" in b.source and b.page in ("README.md", "docs/index.md")
]


@pytest.mark.parametrize("block", OUTBOX_BLOCKS, ids=[f"{b.page}:{b.line}" for b in OUTBOX_BLOCKS])
def test_an_outbox_example_publishes_the_id_the_order_got(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's `place_order` is called (on SQLite, with the shared broker in place
    of the one it names); a block that publishes at the top level just runs."""
    monkeypatch.chdir(tmp_path)
    loop = asyncio.new_event_loop()
    shared: list[Any] = []
    module = types.ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)
    namespace: dict[str, Any] = module.__dict__
    try:
        loop.run_until_complete(_prepare(namespace, shared))
        broker, session, order = namespace["broker"], namespace["session"], namespace["order"]
        code = compile(block.source, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                       dont_inherit=True)
        result = eval(code, namespace)  # noqa: S307 - our own documentation
        if code.co_flags & inspect.CO_COROUTINE:
            loop.run_until_complete(result)
        if "place_order" in namespace:
            namespace["broker"] = broker  # the function reads the global when called
            loop.run_until_complete(namespace["place_order"](session, order))
        loop.run_until_complete(session.commit())

        async def published() -> list[Any]:
            async with broker.engine.connect() as conn:
                result = await conn.execute(sa.text("SELECT payload FROM message"))
                return [json.loads(payload) for (payload,) in result]

        (order_id,) = sa.inspect(order).identity  # committed: reading order.id would reload
        assert isinstance(order_id, int)
        assert loop.run_until_complete(published()) == [{"order_id": order_id}]
    finally:
        try:
            loop.run_until_complete(_close(shared))
        finally:
            _close_loop(loop)


def test_outbox_examples_are_found() -> None:
    assert {b.page for b in OUTBOX_BLOCKS} >= {"README.md", "docs/index.md"}


def test_every_example_file_runs_in_a_test() -> None:
    """examples/*.py are whole apps: each is run by a test, under `faststream run`
    (tests/features/leases_and_durability/test_worker_processes.py: "examples.NAME:app")
    or imported and driven by one (`from examples.NAME import ...`)."""
    tests = "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    examples = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if p.stem != "__init__")
    assert examples
    untested = [
        e for e in examples
        if f'"examples.{e}:app"' not in tests and f"from examples.{e} import" not in tests
    ]
    assert untested == []
