"""The switch interval is short only while broker calls run on a driver's thread."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from faststream_sqla.drivers import _gil
from faststream_sqla.drivers._gil import ShortSwitchInterval


@pytest.fixture(autouse=True)
def default_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield sys.getswitchinterval()
    sys.setswitchinterval(before)


def test_short_while_inside_and_restored_after_the_last_call_leaves(default_interval):
    short = ShortSwitchInterval()
    with short:
        assert sys.getswitchinterval() == pytest.approx(_gil.DRIVER_SWITCH_INTERVAL)
        with short:  # a second call in flight
            pass
        assert sys.getswitchinterval() == pytest.approx(_gil.DRIVER_SWITCH_INTERVAL)
    assert sys.getswitchinterval() == default_interval


def test_restored_after_an_error_too(default_interval):
    short = ShortSwitchInterval()
    with pytest.raises(RuntimeError), short:
        raise RuntimeError("the call failed")
    assert sys.getswitchinterval() == default_interval


def test_a_value_set_by_someone_else_meanwhile_is_kept():
    short = ShortSwitchInterval()
    with short:
        sys.setswitchinterval(0.002)
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_a_shorter_interval_is_left_alone_and_none_turns_it_off(monkeypatch):
    short = ShortSwitchInterval()
    sys.setswitchinterval(0.0001)
    with short:
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    sys.setswitchinterval(0.005)
    monkeypatch.setattr(_gil, "DRIVER_SWITCH_INTERVAL", None)
    with short:
        assert sys.getswitchinterval() == pytest.approx(0.005)
