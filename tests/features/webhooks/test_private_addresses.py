"""Which resolved addresses an endpoint may be delivered to without allow_private:
only those on the public internet, also when an IPv6 address carries a private IPv4
one (mapped, NAT64, IPv4-compatible, 6to4), which a gateway or tunnel could reach; and
the delivery's connections are checked when they are made, whatever was checked
before."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from faststream_sqla.endpoints import is_public
from faststream_sqla.exceptions import InvalidEndpointError
from faststream_sqla.webhooks.guard import PublicOnlyTransport
from tests.support.http_server import served
from tests.support.receiver import Receiver, receiving


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.1.2.3", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "0.0.0.0", "255.255.255.255", "224.0.0.1", "198.18.0.1",
        "::1", "::", "fe80::1%eth0", "fc00::1", "ff02::1",
        "::ffff:127.0.0.1", "::ffff:169.254.169.254",
        "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",  # NAT64 of loopback, of the metadata address
        "::7f00:1", "::a00:1",  # IPv4-compatible
        "2002:7f00:1::1", "2002:a00:1::1",  # 6to4
    ],
)  # fmt: skip
def test_a_private_or_local_address_is_refused(address: str) -> None:
    assert not is_public(address)


@pytest.mark.parametrize(
    "address",
    ["93.184.215.14", "2606:4700::1111", "::ffff:93.184.215.14", "64:ff9b::5db8:d70e",
     "2002:5db8:d70e::1"],
)  # fmt: skip
def test_a_public_address_is_allowed(address: str) -> None:
    assert is_public(address)


async def test_the_delivery_transport_connects_to_no_private_address() -> None:
    limits = httpx.Limits(max_connections=2)
    with receiving() as (receiver, url):
        port = httpx.URL(url).port
        async with httpx.AsyncClient(transport=PublicOnlyTransport(limits=limits)) as client:
            for target in (url, f"http://localhost:{port}/"):
                with pytest.raises(InvalidEndpointError, match="private or local address"):
                    await client.post(target, content=b"{}")
        assert receiver.requests == []
        # the same request without the check arrives: the refusal was the check's
        async with httpx.AsyncClient() as client:
            assert (await client.post(url, content=b"{}")).status_code == 200
        assert len(receiver.requests) == 1


async def test_the_transport_connects_by_the_checked_address_and_tls_checks_the_host(
    tmp_path, monkeypatch
) -> None:
    """A host's name is resolved once, by the check; the connection goes to an address
    it allowed (the next one when the first refuses), and TLS still verifies the
    certificate against the URL's host, not the address."""
    # .ci/run installs the openssl command where it is missing
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=webhook.test",
         "-addext", "subjectAltName=DNS:webhook.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # httpx trusts it, as a deployment would
    asked: list[str] = []

    async def allowed(host: str, port: int) -> list[str]:
        asked.append(host)
        # nothing listens on 127.0.0.2: refused, so the next address is tried
        return ["127.0.0.2", "127.0.0.1"]

    receiver = Receiver()
    with served(receiver, tls=(str(cert), str(key))) as base:
        port = httpx.URL(base).port
        transport = PublicOnlyTransport(limits=httpx.Limits(), addresses=allowed)
        async with httpx.AsyncClient(transport=transport) as client:
            answer = await client.post(f"https://webhook.test:{port}/hook", content=b"{}")
            assert answer.status_code == 200
            # another name reaching the same address: the certificate does not fit it
            with pytest.raises(httpx.ConnectError, match="certificate"):
                await client.post(f"https://other.test:{port}/hook", content=b"{}")
    assert asked == ["webhook.test", "other.test"]
    (request,) = receiver.requests
    assert request.headers["host"] == f"webhook.test:{port}"
