"""A RetryAfter a handler raises is a request, not a fault: the broker's logger (its
default one or yours) writes it as one WARNING line without a traceback, while any
other exception keeps its ERROR line and traceback. A webhook delivery that is refused
is one ERROR line."""

from __future__ import annotations

import logging

import pytest

from faststream_sqla import RetryAfter, SqlaBroker
from faststream_sqla.retry import ConstantRetryStrategy
from tests.support.helpers import FAST, LogLines, Recorder, captured_logger, wait_until

AT_ONCE = ConstantRetryStrategy(delay_seconds=0, max_attempts=5)


def retry_then_fail_then_succeed(broker: SqlaBroker, handled: Recorder) -> None:
    @broker.subscriber("q", retry_strategy=AT_ONCE, **FAST)
    async def handle(body: str) -> None:
        handled.record(body)
        if len(handled.calls) == 1:
            raise RetryAfter(0, "the endpoint is busy")
        if len(handled.calls) == 2:
            raise RuntimeError("a real fault")


async def run_three_attempts(broker: SqlaBroker, handled: Recorder, lines: LogLines) -> None:
    await broker.start()
    await broker.publish("m", queue="q")
    await handled.wait_for(3)

    async def all_processed() -> bool:
        return len(lines.containing("Processed")) >= 3

    await wait_until(all_processed)


async def test_your_logger_writes_a_retry_after_as_one_warning_and_a_fault_with_its_traceback(
    database_url, request
):
    logger, lines = captured_logger(f"levels-{request.node.name}")
    broker = SqlaBroker(database_url, logger=logger)
    handled = Recorder()
    retry_then_fail_then_succeed(broker, handled)
    async with broker:
        await run_three_attempts(broker, handled, lines)
    (retry,) = lines.containing("RetryAfter")
    assert retry.getMessage() == "RetryAfter: retry after 0s: the endpoint is busy"
    assert (retry.levelno, retry.levelname, retry.exc_info) == (logging.WARNING, "WARNING", None)
    (fault,) = lines.containing("RuntimeError")
    assert fault.levelno == logging.ERROR and fault.exc_info is not None


async def test_the_default_logger_writes_a_retry_after_as_one_warning(database_url):
    broker = SqlaBroker(database_url)
    handled = Recorder()
    retry_then_fail_then_succeed(broker, handled)
    lines = LogLines()
    async with broker:
        access = broker.config.logger.logger.logger
        access.addHandler(lines)
        try:
            await run_three_attempts(broker, handled, lines)
        finally:
            access.removeHandler(lines)
    (retry,) = lines.containing("RetryAfter")
    assert (retry.levelno, retry.exc_info) == (logging.WARNING, None)
    (fault,) = lines.containing("RuntimeError")
    assert fault.levelno == logging.ERROR and fault.exc_info is not None


def built_logger(name: str) -> tuple[logging.Logger, LogLines]:
    """A logger made directly, not through logging.getLogger: not in the registry."""
    logger, lines = logging.Logger(name), LogLines()
    logger.addHandler(lines)
    return logger, lines


@pytest.mark.parametrize(
    "make_logger", [captured_logger, built_logger], ids=["registered", "built_directly"]
)
async def test_a_logger_that_writes_only_errors_leaves_the_retry_after_out(
    database_url, request, make_logger
):
    logger, lines = make_logger(f"levels-{request.node.name}")
    logger.setLevel(logging.ERROR)
    broker = SqlaBroker(database_url, logger=logger)
    handled = Recorder()
    retry_then_fail_then_succeed(broker, handled)
    async with broker:
        await broker.start()
        await broker.publish("m", queue="q")
        await handled.wait_for(3)
    assert not lines.containing("RetryAfter")
    assert lines.containing("RuntimeError: a real fault")


def test_the_logger_behind_an_adapter_writes_a_retry_after_as_one_warning(request):
    logger, lines = captured_logger(f"levels-adapted-{request.node.name}")
    SqlaBroker("sqlite+aiosqlite://", logger=logging.LoggerAdapter(logger, {}))
    logger.error("RetryAfter: retry after 1s", exc_info=RetryAfter(1))  # as FastStream logs it
    (line,) = lines.records
    assert (line.levelno, line.exc_info) == (logging.WARNING, None)


def test_your_own_lines_about_a_retry_after_keep_their_level_and_traceback(request):
    logger, lines = captured_logger(f"levels-own-{request.node.name}")
    SqlaBroker("sqlite+aiosqlite://", logger=logger)
    try:
        raise RetryAfter(5, "later")
    except RetryAfter:
        logger.exception("the payment service asked us to wait")
    (line,) = lines.records
    assert line.levelno == logging.ERROR and line.exc_info is not None
