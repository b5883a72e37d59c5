"""Errors of ours under `faststream run`: one line that names the fix, not a traceback.

An error this package raises on purpose (a `SqlaBrokerError`: schema missing or outdated,
database unreachable, bad URL, missing driver, invalid option) already says what is wrong
and how to fix it. FastStream's CLI lets any error leave the app and Typer prints it as
a Rich traceback of some 90 to 180 lines, with that message at the very end.

Under `faststream run` only, `install()` puts a hook in front of `sys.excepthook` (the
interpreter's documented hook for an error nothing caught, which Typer sets the same way):
it prints our errors as `ErrorName: message` on stderr and leaves the interpreter to exit
with status 1; every other error goes to the hook it replaced, so a real bug keeps its
traceback. Whether we run under `faststream run` is read from the command line (Typer
keeps its click context private), so a script or a test runner that uses the broker is
not affected.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from .exceptions import SqlaBrokerError
from .urls import mask_passwords

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]

#: FastStream's CLI program and the command that runs an app
FASTSTREAM_PROGRAM, RUN_COMMAND = "faststream", "run"


def is_faststream_run(argv: Sequence[str]) -> bool:
    """Whether `argv` runs `faststream run ...`, as a script or as `python -m faststream`
    (whose worker processes inherit the same `sys.argv`)."""
    if not argv:
        return False
    program = Path(argv[0])
    if program.name == "__main__.py":
        program = program.parent
    if program.stem != FASTSTREAM_PROGRAM:  # stem: faststream.exe on Windows
        return False
    command = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    return command == RUN_COMMAND


def short_error_line(error: SqlaBrokerError) -> str:
    """How an error of ours is shown instead of its traceback."""
    return f"{type(error).__name__}: {mask_passwords(str(error))}"


class ShortStartupErrors:
    """The `sys.excepthook` that shows our errors as one line and passes on the rest."""

    def __init__(self, previous: ExceptHook) -> None:
        self.previous = previous

    def __call__(
        self, kind: type[BaseException], error: BaseException, tb: TracebackType | None
    ) -> None:
        if isinstance(error, SqlaBrokerError):
            print(short_error_line(error), file=sys.stderr, flush=True)
            return
        self.previous(kind, error, tb)


def install() -> bool:
    """Show our errors short from here on, if this process runs `faststream run`; once."""
    if not is_faststream_run(sys.argv) or isinstance(sys.excepthook, ShortStartupErrors):
        return False
    sys.excepthook = ShortStartupErrors(sys.excepthook)
    return True
