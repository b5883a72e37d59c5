"""Typed errors. Each names the problem and, where there is one, the fix."""


class SqlaBrokerError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidOptionError(SqlaBrokerError, ValueError):
    """An option was given a value it cannot take."""


class InvalidQueueNameError(InvalidOptionError):
    """A queue name is empty, too long or not a string."""


class MessageSerializationError(SqlaBrokerError, TypeError):
    """A message body or its headers cannot be turned into bytes/JSON."""


class MessageTooLargeError(SqlaBrokerError, ValueError):
    """A message is larger than the database accepts in one statement."""


class SchemaError(SqlaBrokerError):
    """The database does not hold the tables this broker needs."""


class SchemaMissingError(SchemaError):
    """Our tables do not exist yet."""


class SchemaOutdatedError(SchemaError):
    """Our tables exist but are not at the revision this version expects."""


class DatabaseUnreachableError(SqlaBrokerError, ConnectionError):
    """The database could not be reached when the broker started."""
