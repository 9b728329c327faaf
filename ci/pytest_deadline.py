"""A time limit per test where pytest-timeout is missing (the lent GPU machine: nothing is
installed there). ``ci/gpu_suite.sh`` loads it with ``-p ci.pytest_deadline``.

Each test (setup, call and teardown) gets the smaller of its ``@pytest.mark.timeout``
seconds and ``GPU_SUITE_TEST_SECONDS`` (default 240); past it, SIGALRM prints every
thread's stack and fails the test, and the run goes on with the next one. Where
pytest-timeout is loaded this does nothing: that plugin enforces the same markers.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from collections.abc import Generator
from typing import Any

import pytest

CAP = float(os.environ.get("GPU_SUITE_TEST_SECONDS", "240"))


def limit_of(item: pytest.Item) -> float:
    """Seconds ``item`` may take: its timeout marker's, at most ``CAP``."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args and float(marker.args[0]) > 0:
        return min(float(marker.args[0]), CAP)
    return CAP


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    if item.config.pluginmanager.hasplugin("timeout") or not hasattr(signal, "SIGALRM"):
        yield
        return
    limit = limit_of(item)

    def expired(signum: int, frame: Any) -> None:
        sys.stderr.write(f"\n+++ {item.nodeid}: over {limit:.0f} s; every thread's stack:\n")
        faulthandler.dump_traceback(all_threads=True)
        pytest.fail(f"Timeout: over {limit:.0f} s (ci/pytest_deadline.py)", pytrace=False)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
