"""What docs/security.md promises the broker never does: evaluate stored data, or
listen on a network port."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import faststream_sqla
from tests.support.helpers import one_handled, recording

PACKAGE = Path(faststream_sqla.__file__).resolve().parent
#: modules that turn bytes into code or objects
UNSAFE_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "jsonpickle"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}


def test_no_stored_data_is_ever_unpickled_or_evaluated():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names = {node.func.id} & UNSAFE_CALLS
            else:
                continue
            if names & (UNSAFE_MODULES | UNSAFE_CALLS):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, f"code that can turn stored bytes into objects or code: {found}"


def _listening_socket_inodes() -> set[str]:
    """Inodes of TCP/UDP sockets in LISTEN state (TCP) or bound for receiving (UDP),
    on any address, from the kernel's tables."""
    inodes = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            state, inode = fields[3], fields[9]
            if (table.startswith("tcp") and state == "0A") or table.startswith("udp"):
                inodes.add(inode)
    return inodes


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


async def test_a_running_broker_listens_on_no_port(make_broker):
    listening_before = _own_socket_inodes() & _listening_socket_inodes()
    broker = make_broker()
    got = recording(broker, "q")

    async with one_handled(broker, got, "hello"):
        listening = _own_socket_inodes() & _listening_socket_inodes()
    assert listening <= listening_before  # the test runner's own, if any
