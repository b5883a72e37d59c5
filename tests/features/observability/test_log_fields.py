"""Every log line about a message carries its queue, id, attempt and correlation id as
LogRecord attributes, where a JSON formatter finds them, on every database."""

from __future__ import annotations

import json
import logging

from faststream import Logger

from faststream_sqla import MessageLogFields, SqlaBroker, SqlaMessage
from faststream_sqla.retry import ConstantRetryStrategy

from tests.support.helpers import FAST, LogLines, Recorder, captured_logger, wait_until

FIELDS = ("queue", "message_id", "attempt", "correlation_id")


class JsonFormatter(logging.Formatter):
    """What a structured-logging setup does: the message plus chosen record fields."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {"message": record.getMessage(), **{f: getattr(record, f, None) for f in FIELDS}}
        )


async def test_handler_log_lines_carry_the_message_fields(database_url, request):
    logger, lines = captured_logger(f"log-fields-{request.node.name}")
    broker = SqlaBroker(database_url, logger=logger)
    logger.addFilter(MessageLogFields(broker))  # for the handler's own lines
    attempts = Recorder()

    @broker.subscriber("audit", retry_strategy=ConstantRetryStrategy(delay_seconds=0.01), **FAST)
    async def handle(body: str, msg: SqlaMessage, log: Logger) -> None:
        log.info("handling %s", body)
        attempts.record(msg.attempts_count)
        if msg.attempts_count == 0:
            raise RuntimeError("try again")

    async with broker:
        await broker.start()
        message_id = await broker.publish("a", queue="audit", correlation_id="corr-7")
        await attempts.wait_for(2)

        async def both_processed() -> bool:
            return len(lines.containing("Processed")) >= 2

        await wait_until(both_processed)

    formatter = JsonFormatter()
    about_message = [
        json.loads(formatter.format(r))
        for r in lines.records
        if r.getMessage() in ("Received", "Processed", "handling a")
        or r.getMessage().startswith("RuntimeError")
    ]
    # Received, handling, error, Processed; then Received, handling, Processed
    assert len(about_message) == 7
    for fields in about_message:
        assert fields["queue"] == "audit"
        assert fields["message_id"] == str(message_id)
        assert fields["correlation_id"] == "corr-7"
    assert [f["attempt"] for f in about_message] == [1, 1, 1, 1, 2, 2, 2]
    (error,) = lines.containing("RuntimeError")
    assert error.levelno == logging.ERROR
    # lines about no message have the fields too, empty
    (connected,) = lines.containing("Connected to")
    assert json.loads(formatter.format(connected))["correlation_id"] == ""
    logger.filters.clear()


async def test_default_logger_lines_carry_the_fields(database_url):
    broker = SqlaBroker(database_url)  # FastStream's logger: faststream.access.sqla
    handled = Recorder()

    @broker.subscriber("plain", **FAST)
    async def handle(body: str, log: Logger) -> None:
        log.info("handling %s", body)
        handled.record(body)

    lines = LogLines()
    async with broker:
        access = broker.config.logger.logger.logger
        access.addHandler(lines)
        try:
            await broker.start()
            await broker.publish("p", queue="plain", correlation_id="c-9")
            await handled.wait_for(1)
        finally:
            access.removeHandler(lines)
    (own,) = lines.containing("handling p")
    assert (own.queue, own.attempt, own.correlation_id) == ("plain", 1, "c-9")


async def test_batch_handler_lines_name_the_batch(database_url, request):
    logger, lines = captured_logger(f"log-fields-{request.node.name}")
    broker = SqlaBroker(database_url, logger=logger)
    handled = Recorder()

    @broker.subscriber("bulk", batch=True, **FAST)
    async def handle(bodies: list[str]) -> None:
        handled.record(bodies)

    async with broker:
        await broker.start()
        first, *_ = await broker.publish_batch("x", "y", queue="bulk", correlation_id="b-1")
        await handled.wait_for(1)

        async def processed() -> bool:
            return bool(lines.containing("Processed"))

        await wait_until(processed)

    received = lines.containing("Received")[0]
    assert received.queue == "bulk"
    assert received.correlation_id == "b-1"
    assert received.attempt == 1
    assert str(received.message_id).startswith(str(first))
