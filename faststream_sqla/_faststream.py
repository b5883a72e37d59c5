"""The private attributes of FastStream that the broker reads or writes.

Third-party brokers build on `faststream._internal` (its broker, subscriber and publisher
use cases, configs and protected `_x` hooks, which every FastStream broker overrides);
that surface is covered by the `faststream<0.8` pin and the whole test suite. Two further
attributes are private even there, and are kept here, one function each, so that a
FastStream release that changes them breaks one place: tests/drivers/test_dependency_adapters.py
checks both against the installed FastStream and names its version when they moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.di import FastDependsConfig
    from faststream._internal.endpoint.subscriber import SubscriberUsecase

#: the name-mangled slot of `SubscriberUsecase.__auto_ack_disabled`
AUTO_ACK_DISABLED = "_SubscriberUsecase__auto_ack_disabled"


def serializer_of(fd_config: FastDependsConfig) -> SerializerProto | None:
    """The serializer FastDepends validates bodies with: the configured one, or the
    default pydantic one when none was given (what FastStream's own brokers read)."""
    return fd_config._serializer


def set_auto_ack_disabled(subscriber: SubscriberUsecase[Any], disabled: bool) -> None:
    """Set what FastStream read from the subscriber's config at construction: whether
    its ack policy leaves settling to the handler (which decides the middleware stack).
    A router's subscriber learns its ack policy only when included, after that."""
    setattr(subscriber, AUTO_ACK_DISABLED, disabled)
