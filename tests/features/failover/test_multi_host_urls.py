"""A multi-host PostgreSQL URL (`?host=h1:p1&host=h2:p2&target_session_attrs=read-write`,
how a client follows a failover) is shown readably, with its password masked, wherever
a URL is printed: errors, logs, CLI output. PostgreSQL only: the hosts list and
`target_session_attrs` are asyncpg's."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from chaos.servers import free_port
from faststream_sqla import DatabaseUnreachableError, SqlaBroker
from faststream_sqla.urls import masked
from tests.support.cli import cli

pytestmark = pytest.mark.databases("postgresql")

PASSWORD = "s3cr@t:pw"


def multi_host_url() -> tuple[str, list[str]]:
    """A URL naming two hosts on which nothing listens, and the hosts as written."""
    hosts = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    query = "&".join(f"host={host}" for host in hosts)
    encoded = PASSWORD.replace("@", "%40").replace(":", "%3A")
    url = f"postgresql+asyncpg://postgres:{encoded}@/queue?{query}&target_session_attrs=read-write"
    return url, hosts


def assert_readable(text: str, hosts: list[str]) -> None:
    assert "&".join(f"host={host}" for host in hosts) in text, text
    assert "target_session_attrs=read-write" in text, text
    assert "postgres:***@" in text, text
    for secret in (PASSWORD, "s3cr", "%3A"):
        assert secret not in text, text


def test_a_masked_multi_host_url_names_its_hosts_as_written_and_parses_back():
    url, hosts = multi_host_url()
    shown = masked(url)
    assert_readable(shown, hosts)
    assert make_url(shown) == make_url(url).set(password="***")


async def test_an_unreachable_multi_host_database_is_named_readably_with_the_password_masked():
    url, hosts = multi_host_url()
    broker = SqlaBroker(url, logger=None)
    with pytest.raises(DatabaseUnreachableError) as raised:
        await broker.connect()
    assert_readable(str(raised.value), hosts)


async def test_the_cli_names_an_unreachable_multi_host_database_readably():
    url, hosts = multi_host_url()
    result = await cli(url, "queues", code=1)
    assert_readable(result.output.replace("\n", ""), hosts)


def test_spark_executors_get_a_multi_host_url_as_written():
    from faststream_sqla.spark._runner import executor_url

    url, _ = multi_host_url()
    assert executor_url(url) == url
