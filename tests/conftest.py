"""Every test starts from a clean distbridge state and must not leak env vars or process groups."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch.distributed as dist
from hypothesis import settings

import distbridge as idist
from distbridge.testing import reset_state
from tests import progress
from tests.distributed import warm
from tests.ports import free_port

# No time limit per generated example: hypothesis's default deadline (200 ms) is a timing
# assert, and on a loaded 2-core CI machine a pure function took 397 ms once. Speed is
# measured in bench/, never asserted in tests.
settings.register_profile("distbridge", deadline=None)
settings.load_profile("distbridge")

# Variables pytest and torch itself set (torch's inductor caches on first optimizer use).
_NOT_OURS = ("PYTEST_CURRENT_TEST", "TORCHINDUCTOR_")


def pytest_configure(config: pytest.Config) -> None:
    # Where pytest-timeout is missing (the lent GPU machine: ci/gpu_suite.sh), its marker is
    # still known, so that --strict-markers collects the files that set a limit; the limit
    # itself then does not apply (the suite's multi-process helpers keep their own timeouts).
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): pytest-timeout's limit (unused)")


def pytest_report_header(config: pytest.Config) -> str:
    return progress.HEADER


def pytest_sessionstart(session: pytest.Session) -> None:
    progress.show_elapsed_time(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    warm.close()  # the warm worlds some distributed tests share (tests/distributed/warm.py)


@pytest.fixture(autouse=True)
def _no_leaks() -> Iterator[None]:
    reset_state()
    env_before = dict(os.environ)
    yield
    leaked_group = dist.is_available() and dist.is_initialized()
    env_after = dict(os.environ)
    reset_state()
    if leaked_group:
        dist.destroy_process_group()
    changed = {
        k: (env_before.get(k), env_after.get(k))
        for k in set(env_before) | set(env_after)
        if env_before.get(k) != env_after.get(k) and not k.startswith(_NOT_OURS)
    }
    os.environ.clear()
    os.environ.update(env_before)
    assert not leaked_group, "the test left a torch.distributed process group initialized"
    assert not changed, f"the test changed environment variables (before, after): {changed}"


@pytest.fixture
def serial_model() -> Iterator[None]:
    """The test starts with the serial model active (no context), and leaves none."""
    reset_state()
    assert idist.model_name() == "serial"
    yield
    reset_state()


@pytest.fixture
def gloo_world_of_one() -> Iterator[None]:
    """A real gloo world of one process (a free TCP port), finalized after the test."""
    idist.initialize("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        idist.finalize()
