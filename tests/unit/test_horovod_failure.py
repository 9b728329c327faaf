"""What spawn('horovod') raises, read from horovod.run's error and the workers' stderr
(`distbridge.launch.horovod._failure`); needs no Horovod."""

from __future__ import annotations

from pathlib import Path

import pytest

from distbridge.errors import SpawnTimeoutError, WorkerFailedError
from distbridge.launch.horovod import _failure


def _error(text: str) -> RuntimeError:
    return RuntimeError(f"Horovod detected that one or more processes exited. {text}")


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (137, "was killed by signal SIGKILL"),  # the shell's 128 + 9
        (-9, "was killed by signal SIGKILL"),
        (3, "exited with code 3"),
    ],
)
def test_a_worker_that_died_is_named_with_how_it_ended(
    tmp_path: Path, code: int, says: str
) -> None:
    error = _failure(_error(f"Process name: 3\nExit code: {code}"), tmp_path, 2, 1.0, None)
    assert isinstance(error, WorkerFailedError)
    assert str(error).startswith(f"Worker rank 3 (local rank 1) {says}. The other workers")
    assert (error.rank, error.local_rank, error.exitcode) == (3, 1, code)


def test_a_worker_that_exited_0_without_a_result_is_said_so(tmp_path: Path) -> None:
    error = _failure(RuntimeError("no result"), tmp_path, 2, 1.0, None)
    assert isinstance(error, WorkerFailedError)
    assert str(error).startswith("A worker exited without reporting a result (exit code 0")
    assert "horovod.run said: no result." in str(error)


def test_a_job_past_its_timeout_raises_spawn_timeout_error(tmp_path: Path) -> None:
    error = _failure(_error("Process name: 0\nExit code: 1"), tmp_path, 2, 9.0, 8.0)
    assert isinstance(error, SpawnTimeoutError)
    assert str(error).startswith("The job ran past its job_timeout of 8.0 s; every worker was")
