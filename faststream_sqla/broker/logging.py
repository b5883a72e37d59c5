"""Log lines carry the queue and message id, like FastStream's own brokers."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from faststream._internal.logger import DefaultLoggerStorage, make_logger_state
from faststream._internal.logger.logging import get_broker_logger

if TYPE_CHECKING:
    from faststream._internal.basic_types import LoggerProto
    from faststream._internal.context import ContextRepo


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
                default_context={"queue": ""},
                message_id_ln=10,
                fmt=(
                    "%(asctime)s %(levelname)-8s - "
                    f"%(queue)-{self._max_queue_len}s | "
                    "%(message_id)-10s - %(message)s"
                ),
                context=context,
                log_level=self.logger_log_level,
            )
            self._logger_ref.add(lg)
        return lg


make_sqla_logger_state = partial(make_logger_state, default_storage_cls=SqlaParamsStorage)
