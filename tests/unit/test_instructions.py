"""benchmarks.instructions reads callgrind's count and turns two runs into a message's cost."""

from __future__ import annotations

import pytest

from benchmarks.instructions import collected_instructions, per_message

# the end of what `valgrind --tool=callgrind` writes to stderr; the program's own output
# may come first, and a child valgrind follows into would report before its parent
VALGRIND_STDERR = """\
==4242== Callgrind, a call-graph generating cache profiler
==4242== Command: python -m benchmarks.instructions pipeline 1000
==4242== Events    : Ir
==4243== Collected : 1200
==4242== Collected : 3586291995
==4242==
==4242== I   refs:      3,586,291,995
"""


def test_the_count_is_the_last_collected_line() -> None:
    assert collected_instructions(VALGRIND_STDERR) == 3_586_291_995


def test_output_without_a_count_is_an_error_that_shows_it() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)no instruction count.*Command: python"):
        collected_instructions(VALGRIND_STDERR.replace("Collected", "Gathered"))


def test_fixed_costs_cancel_between_the_two_runs() -> None:
    fixed, each = 3_000_000_000, 400_000
    small, large = (1000, fixed + 1000 * each), (3000, fixed + 3000 * each)
    assert per_message(small, large) == each


def test_the_large_run_must_be_larger() -> None:
    with pytest.raises(ValueError, match="more messages"):
        per_message((3000, 10), (3000, 20))
