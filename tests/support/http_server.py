"""An ASGI app served over real HTTP on a free 127.0.0.1 port, by uvicorn in a thread
of its own, for as long as a block runs."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


@contextmanager
def served(app: Any, *, tls: tuple[str, str] | None = None) -> Iterator[str]:
    """`app` served over HTTP (HTTPS with `tls`, the certificate and key files) until
    the block ends; its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    certfile, keyfile = tls or (None, None)
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", lifespan="on", ssl_certfile=certfile, ssl_keyfile=keyfile
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # uvicorn announces its start only through this flag
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the HTTP server did not start")
        time.sleep(0.02)
    try:
        yield f"{'https' if tls else 'http'}://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
