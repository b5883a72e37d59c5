"""The hook that shows our errors as one line under `faststream run` (startup_errors.py):
when it counts as `faststream run`, and that anything else reaches the hook it replaced.
The processes themselves are in tests/features/configuration/test_startup_errors.py."""

from __future__ import annotations

import contextlib
import io

import pytest

from faststream_sqla.exceptions import SchemaMissingError
from faststream_sqla.startup_errors import ShortStartupErrors, is_faststream_run


@pytest.mark.parametrize(
    "argv",
    [
        ["/venv/bin/faststream", "run", "app:app"],
        ["/venv/bin/faststream", "run", "app:app", "--workers", "2"],
        ["/venv/lib/python3.11/site-packages/faststream/__main__.py", "run", "app:app"],
        ["C:/venv/Scripts/faststream.exe", "run", "app:app"],
    ],
)
def test_faststream_run_is_recognised_as_a_script_and_as_a_module(argv):
    assert is_faststream_run(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["/venv/bin/faststream", "publish", "app:app", "hi"],
        ["/venv/bin/faststream", "docs", "gen", "app:app"],
        ["/venv/bin/pytest", "run"],
        ["/venv/bin/faststream-sqla", "queues"],
        ["-c"],
    ],
)
def test_other_programs_and_commands_keep_their_tracebacks(argv):
    assert not is_faststream_run(argv)


def test_our_errors_print_one_masked_line_and_others_reach_the_previous_hook():
    seen: list[BaseException] = []

    def previous(kind, error, tb) -> None:
        seen.append(error)

    hook = ShortStartupErrors(previous)
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        hook(SchemaMissingError, SchemaMissingError("run: x --url postgresql://u:pw@h/d"), None)
    assert printed.getvalue() == "SchemaMissingError: run: x --url postgresql://u:***@h/d\n"
    assert seen == []
    bug = KeyError("bug")
    hook(KeyError, bug, None)
    assert seen == [bug]
