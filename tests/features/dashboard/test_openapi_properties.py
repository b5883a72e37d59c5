"""Property-based tests of the dashboard API from its own OpenAPI document
(schemathesis): for every operation, generated requests, valid and
not, never get a server error, and every answer matches the document (status, content
type, schema). A few messages, dead letters and a channel make the reads find rows."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.dashboard import create_app

#: generated requests per operation and mode (valid, invalid), on each database
EXAMPLES = 10
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


async def _some_rows(url: str) -> None:
    async with SqlaBroker(url) as broker:
        await broker.connect()
        await broker.publish_batch(
            "a", b"\xff", Envelope("c", channel="acme", ordering_key="k"), queue="q"
        )


# SQLite and PostgreSQL: the document and the checks are the same on MariaDB, whose
# statements the other dashboard tests run; three databases would double the time
@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql"])
def test_no_request_gets_a_server_error_or_an_answer_off_the_document(database_url):
    # on a thread of its own: the test runs inside pytest-asyncio's loop
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, _some_rows(database_url)).result()
    # the test client runs each request on an event loop of its own: no pooled
    # connection may outlive one
    engine = create_async_engine(database_url, poolclass=NullPool)
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", create_app(engine))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 23  # every route, /api/workers and the throughput included
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def answers_by_the_document(case: schemathesis.Case) -> None:
                case.call_and_validate(checks=CHECKS)

            try:
                answers_by_the_document()
            except Unsatisfiable:
                # no invalid request exists for an operation without parameters
                assert mode is GenerationMode.NEGATIVE, operation.label
