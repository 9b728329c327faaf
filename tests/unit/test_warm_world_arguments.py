"""A warm world's time limits are checked where they are given, before any rank starts: a
number of seconds > 0 (NaN, zero, a bool or a string is a ValueError that names it)."""

from __future__ import annotations

import pytest

from distbridge.testing import WarmWorld


def _rank_fn() -> None:
    """Never called: the arguments are refused first."""


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, "60"])
def test_start_timeout_must_be_seconds(bad: object) -> None:
    with pytest.raises(ValueError, match=r"start_timeout must be a number of seconds > 0, got "):
        WarmWorld(2, start_timeout=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, float("nan"), False, None])
def test_run_timeout_must_be_seconds_and_starts_nothing(bad: object) -> None:
    world = WarmWorld(2)
    with pytest.raises(ValueError, match=r"timeout must be a number of seconds > 0, got "):
        world.run(_rank_fn, timeout=bad)  # type: ignore[arg-type]
    assert not world.alive
