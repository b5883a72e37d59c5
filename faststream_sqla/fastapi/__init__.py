"""FastAPI integration: `SqlaRouter`, a FastAPI router that starts and stops a
`SqlaBroker` with the application; its handlers use FastAPI's dependency injection and
endpoints receive the broker as a dependency (`SqlaBroker` here is the annotated
dependency, as in FastStream's own integrations)."""

from typing import Annotated

from faststream._internal.fastapi.context import Context, ContextRepo, Logger

from faststream_sqla.broker.broker import SqlaBroker as _Broker
from faststream_sqla.fastapi.router import SqlaRouter
from faststream_sqla.message import SqlaMessage as _Message

__all__ = ("Context", "ContextRepo", "Logger", "SqlaBroker", "SqlaMessage", "SqlaRouter")

#: the router's broker, in an endpoint or a handler
SqlaBroker = Annotated[_Broker, Context("broker")]
#: the message being handled, in a handler
SqlaMessage = Annotated[_Message, Context("message")]
