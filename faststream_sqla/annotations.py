"""Context annotations for handler signatures: `msg: SqlaMessage` is injected."""

from typing import Annotated

from faststream._internal.context import Context
from faststream.annotations import ContextRepo, Logger
from faststream.params import NoCast
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.broker.broker import SqlaBroker as _Broker
from faststream_sqla.message import SqlaMessage as _Message

__all__ = ("ContextRepo", "Engine", "Logger", "NoCast", "SqlaBroker", "SqlaMessage")

SqlaMessage = Annotated[_Message, Context("message")]
SqlaBroker = Annotated[_Broker, Context("broker")]
Engine = Annotated[AsyncEngine, Context("broker._connection")]
