"""Log lines carry the queue, message id, attempt and correlation id, like FastStream's
own brokers' lines carry theirs."""

from __future__ import annotations

import logging
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any

from faststream._internal.context import ContextRepo
from faststream._internal.logger import DefaultLoggerStorage, make_logger_state
from faststream._internal.logger.logging import ExtendedFilter, get_broker_logger

if TYPE_CHECKING:
    from faststream._internal.basic_types import LoggerProto

#: how much of a message id the default log format shows
MESSAGE_ID_LENGTH = 10


class SqlaParamsStorage(DefaultLoggerStorage):
    def __init__(self) -> None:
        super().__init__()
        self._max_queue_len = 5
        self.logger_log_level = logging.INFO

    def set_level(self, level: int) -> None:
        self.logger_log_level = level

    def register_subscriber(self, params: dict[str, Any]) -> None:
        self._max_queue_len = max(self._max_queue_len, len(params.get("queue", "")))

    def get_logger(self, *, context: ContextRepo) -> LoggerProto:
        if not (lg := self._get_logger_ref()):
            lg = get_broker_logger(
                name="sqla",
                # every line has the fields, so a JSON formatter finds the same keys
                default_context={
                    "queue": "",
                    "message_id": "",
                    "attempt": "",
                    "correlation_id": "",
                },
                message_id_ln=MESSAGE_ID_LENGTH,
                fmt=(
                    "%(asctime)s %(levelname)-8s - "
                    f"%(queue)-{self._max_queue_len}s | "
                    "%(message_id)-10s - %(message)s"
                ),
                context=context,
                log_level=self.logger_log_level,
            )
            _share_fields_filter(lg, context)
            one_line_handler_signals(lg)
            self._logger_ref.add(lg)
        return lg


class _EveryBrokersFields(logging.Filter):
    """The message fields for the default logger, from whichever broker of the process
    is handling the message. FastStream adds a filter per broker to the one shared
    logger, and the first broker's filter gives every line its own (empty) fields, which
    hid the fields of all the others."""

    def __init__(self, message_id_ln: int) -> None:
        super().__init__()
        self.message_id_ln = message_id_ln
        self.contexts: weakref.WeakSet[ContextRepo] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        fields: dict[str, Any] = {}
        for context in list(self.contexts):
            if found := context.get_local("log_context", None):
                fields = found
                break
        for name in MESSAGE_LOG_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name, ""))
        # an extra field, present since the loop above: LogRecord does not declare it
        record.message_id = str(record.message_id)[: self.message_id_ln]  # type: ignore[attr-defined]
        return True


def _share_fields_filter(logger: logging.Logger, context: ContextRepo) -> None:
    shared = next((f for f in logger.filters if isinstance(f, _EveryBrokersFields)), None)
    for f in [f for f in logger.filters if isinstance(f, ExtendedFilter)]:
        logger.removeFilter(f)
    if shared is None:
        shared = _EveryBrokersFields(message_id_ln=MESSAGE_ID_LENGTH)
        logger.addFilter(shared)
    shared.contexts.add(context)


class _OneLineHandlerSignals(logging.Filter):
    """FastStream logs whatever a handler raises at ERROR with its traceback, as the
    line "Type: message". For an exception whose class names a `handler_log_level`
    (RetryAfter: a request to retry, not a fault) that line is written at that level
    instead, without the traceback, and dropped where `logger` does not write that
    level. Every other record passes as it is."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info:  # every line but a failure's: passed as it is
            return True
        exc = record.exc_info[1]
        level = getattr(type(exc), "handler_log_level", None)
        if not isinstance(level, int) or record.getMessage() != f"{type(exc).__name__}: {exc}":
            return True
        if not self.logger.isEnabledFor(level):
            return False
        record.levelno, record.levelname = level, logging.getLevelName(level)
        record.exc_info = record.exc_text = None
        return True


def one_line_handler_signals(logger: object) -> None:
    """Adds `_OneLineHandlerSignals` to `logger` once: a `logging.Logger`, or the one a
    `logging.LoggerAdapter` wraps. Other logger objects are left as they are."""
    while isinstance(logger, logging.LoggerAdapter):
        logger = logger.logger
    if isinstance(logger, logging.Logger) and not any(
        isinstance(f, _OneLineHandlerSignals) for f in logger.filters
    ):
        logger.addFilter(_OneLineHandlerSignals(logger))


make_sqla_logger_state = partial(make_logger_state, default_storage_cls=SqlaParamsStorage)


#: the fields every log line about a message carries (LogRecord attributes)
MESSAGE_LOG_FIELDS = ("queue", "message_id", "attempt", "correlation_id")


class MessageLogFields(logging.Filter):
    """Adds the message fields (queue, message_id, attempt, correlation_id) to lines your
    own logger writes while a handler of `broker` runs, as the broker's default logger
    does. FastStream's own lines about a message carry them already.

    `logger.addFilter(MessageLogFields(broker))`, or on a handler of that logger.
    """

    def __init__(self, broker: Any) -> None:
        super().__init__()
        self._context: ContextRepo = broker.context

    def filter(self, record: logging.LogRecord) -> bool:
        fields = self._context.get_local("log_context", None) or {}
        for name in MESSAGE_LOG_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name, ""))
        return True
