"""Throwaway database servers: a fresh data directory in a temporary folder, a free
port on 127.0.0.1, started and stopped (gently or not) by a chaos run or a test that
must break a server without touching the shared one.

PostgreSQL runs from the installed version's binaries as the `postgres` user, MariaDB's
server as the `mysql` user (both as themselves when not run as root). Each has a
replicated pair too: `ReplicatedPostgres` (a primary and a streaming standby) and
`ReplicatedMariaDB` (a primary and a GTID replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

#: how long a server may take to start or stop
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as(user: str, argv: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *argv] if os.geteuid() == 0 else argv


def _home(user: str) -> Path:
    """A temporary folder the server's user owns (pytest's own are private to root)."""
    home = Path(tempfile.mkdtemp(prefix=f"fsqla-{user}-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(home, user, user)
    return home


async def _run(argv: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), START_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{out.decode(errors='replace')}")


async def _until_answers(port: int) -> None:
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"no server on port {port} after {START_TIMEOUT}s") from None
            await asyncio.sleep(0.05)  # polling a port: no event says it is open
        else:
            writer.close()
            return


class ThrowawayPostgres:
    """`async with ThrowawayPostgres() as server:` then `server.url`, `await
    server.stop("fast" | "immediate")`, `await server.start()`, `await server.kill()`
    (SIGKILL to the postmaster: a crash of the machine, as far as clients can tell).
    `settings` are server settings given at start (`-c name=value`)."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.settings = dict(settings or {})
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            raise RuntimeError("PostgreSQL's server binaries are not installed")
        self.bin = Path(found[-1]).parent
        self.port = free_port()
        self.home = _home("postgres")
        self.data = self.home / "data"
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> list[str]:
        return _as("postgres", [str(self.bin / "pg_ctl"), "-D", str(self.data), *args])

    async def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 -c fsync=off"
        )
        for name, value in self.settings.items():
            options += f" -c {name}={value}"
        await _run(self._ctl("-w", "-l", str(self.home / "server.log"), "-o", options, "start"))
        await _until_answers(self.port)

    async def stop(self, mode: str = "fast") -> None:
        await _run(self._ctl("-w", "-m", mode, "stop"))

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    async def kill(self) -> None:
        """SIGKILL the postmaster; its backends end by themselves once they notice."""
        pid = self.postmaster_pid()
        if pid is None:
            raise RuntimeError(f"no postmaster running in {self.data}")
        os.kill(pid, signal.SIGKILL)

    async def promote(self) -> None:
        """A standby becomes a primary (waits until it accepts writes)."""
        await _run(self._ctl("-w", "promote"))

    async def initialise(self) -> None:
        await _run(_as("postgres", [
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "--no-sync",
        ]))

    async def __aenter__(self) -> ThrowawayPostgres:
        await self.initialise()
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.stop("immediate")
        self._kill_leftovers()
        shutil.rmtree(self.home, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """A killed postmaster's backends, should any still run (they exit once they
        notice it gone)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        for stat in glob.glob("/proc/[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:  # a child of the killed postmaster
                    os.kill(int(Path(stat).parent.name), signal.SIGKILL)


class ReplicatedPostgres:
    """A throwaway primary and a streaming standby of it (`pg_basebackup -R -X stream`),
    synchronous (`synchronous_standby_names = '*'`: a commit returns once the standby
    has it) or asynchronous. `url` names both hosts, read-write first
    (`target_session_attrs=read-write`), as a client that follows a failover would:
    `await pair.primary.kill()`, then `await pair.standby.promote()`."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        settings = {"synchronous_standby_names": "'*'"} if synchronous else {}
        self.primary = ThrowawayPostgres(settings | {"synchronous_commit": "on"})
        self.standby = ThrowawayPostgres()
        hosts = "&".join(f"host=127.0.0.1:{s.port}" for s in (self.primary, self.standby))
        self.url = (
            f"postgresql+asyncpg://postgres@/postgres?{hosts}&target_session_attrs=read-write"
        )

    async def __aenter__(self) -> ReplicatedPostgres:
        await self.primary.__aenter__()
        try:
            await _run(_as("postgres", [
                str(self.primary.bin / "pg_basebackup"), "-h", "127.0.0.1",
                "-p", str(self.primary.port), "-U", "postgres", "-D", str(self.standby.data),
                "-R", "-X", "stream", "--no-sync",
            ]))
            await self.standby.start()
            await self._until_streaming()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _until_streaming(self) -> None:
        """Wait until the primary sees its standby streaming (and, when synchronous,
        as its synchronous standby): before that, a synchronous commit would wait."""
        wanted = "sync" if self.synchronous else "async"
        argv = _as("postgres", [
            str(self.primary.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.primary.port),
            "-U", "postgres", "-Atc",
            "SELECT state || ' ' || sync_state FROM pg_stat_replication",
        ])
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT
        while True:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
            )
            out, _ = await proc.communicate()
            if out.decode().split() == ["streaming", wanted]:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the standby did not stream within {START_TIMEOUT}s")
            await asyncio.sleep(0.1)  # polling another process's state: no event to await

    async def __aexit__(self, *exc: object) -> None:
        await self.standby.__aexit__()
        await self.primary.__aexit__()


class ThrowawayMariaDB:
    """The same for MariaDB: `await server.stop()` sends SIGTERM (a clean shutdown),
    `await server.stop(kill=True)` SIGKILL (a crash, recovered at the next start).
    `options` are server options given at start (`--name=value`)."""

    def __init__(self, options: list[str] | None = None) -> None:
        self.options = list(options or [])
        self.port = free_port()
        self.home = _home("mysql")
        self.data = self.home / "data"
        self.url = f"mysql+asyncmy://root@127.0.0.1:{self.port}/test"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        log = (self.home / "server.log").open("ab")
        argv = _as("mysql", [
            "/usr/sbin/mariadbd", "--no-defaults", f"--datadir={self.data}",
            f"--port={self.port}", f"--socket={self.home / 'mysqld.sock'}",
            f"--pid-file={self.home / 'mysqld.pid'}", "--bind-address=127.0.0.1",
            # its own temporary files: sharing /tmp with the machine's server, it could
            # clear that server's temporary tables as its own leftovers at start
            f"--tmpdir={self.home}",
            "--skip-grant-tables", "--innodb-flush-log-at-trx-commit=2",
            "--max-allowed-packet=64M", *self.options,
        ])
        self.proc = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log)
        await _until_answers(self.port)

    async def stop(self, *, kill: bool = False) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        # runuser passes the signal on; with SIGKILL it would die alone, so the
        # server is signalled by its own pid
        pid = int((self.home / "mysqld.pid").read_text()) if (self.home / "mysqld.pid").exists() else self.proc.pid
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        await asyncio.wait_for(self.proc.wait(), START_TIMEOUT)
        self.proc = None

    async def __aenter__(self) -> ThrowawayMariaDB:
        await _run(_as("mysql", [
            "mariadb-install-db", "--no-defaults", f"--datadir={self.data}",
            "--auth-root-authentication-method=normal", "--skip-test-db",
            f"--tmpdir={self.home}",
        ]))
        await self.start()
        await _run([
            "mariadb", "--no-defaults", "-h", "127.0.0.1", f"--port={self.port}", "-uroot",
            "-e", "CREATE DATABASE IF NOT EXISTS test",
        ])
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.stop(kill=True)
        shutil.rmtree(self.home, ignore_errors=True)

    async def sql(self, statement: str) -> str:
        """Run `statement` with the `mariadb` client; its tab-separated output."""
        proc = await asyncio.create_subprocess_exec(
            "mariadb", "--no-defaults", "-h", "127.0.0.1", f"--port={self.port}", "-uroot",
            "--batch", "-e", statement,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), START_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"{statement} failed:\n{out.decode(errors='replace')}")
        return out.decode()


class ReplicatedMariaDB:
    """A throwaway MariaDB primary (binary log on, server id 1) and a replica of it
    (server id 2, read-only) that follows it by GTID (`CHANGE MASTER TO`, then `START
    SLAVE`). `primary.url` and `replica.url` name their `test` databases. Promoting the
    replica is an operator's job (docs/production.md), so nothing here does it."""

    def __init__(self) -> None:
        self.primary = ThrowawayMariaDB(
            ["--server-id=1", "--log-bin=primary-bin", "--binlog-format=ROW"]
        )
        self.replica = ThrowawayMariaDB(["--server-id=2", "--read-only"])

    async def __aenter__(self) -> ReplicatedMariaDB:
        await self.primary.__aenter__()
        try:
            await self.replica.__aenter__()
            # from the primary's first binary log on (an empty replica's GTID position):
            # CREATE DATABASE test replays as the no-op it is here
            await self.replica.sql(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
                f"MASTER_PORT={self.primary.port}, MASTER_USER='root', "
                "MASTER_USE_GTID=slave_pos; START SLAVE"
            )
            await self.until_caught_up()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def until_caught_up(self) -> None:
        """Wait until the replica has applied all the primary has written so far: the
        replica's MASTER_GTID_WAIT returns once its position reaches the primary's."""
        position = (await self.primary.sql("SELECT @@gtid_binlog_pos")).splitlines()[1:]
        waited = await self.replica.sql(
            f"SELECT MASTER_GTID_WAIT('{''.join(position)}', {START_TIMEOUT})"
        )
        if waited.splitlines()[1] != "0":
            raise TimeoutError(f"the replica did not catch up within {START_TIMEOUT}s")

    async def __aexit__(self, *exc: object) -> None:
        await self.replica.__aexit__()
        await self.primary.__aexit__()


@contextlib.asynccontextmanager
async def throwaway(dialect: str) -> AsyncIterator[ThrowawayPostgres | ThrowawayMariaDB]:
    server = ThrowawayPostgres() if dialect == "postgresql" else ThrowawayMariaDB()
    async with server:
        yield server
