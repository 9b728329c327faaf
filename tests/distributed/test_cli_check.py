"""``python -m distbridge check`` for real: spawned workers, torchrun, and a failing rank."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]

_LAUNCHER_PREFIXES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_", "TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "LSB_", "JSM_",
    "MV2_", "MPI_LOCALRANKID",
)  # fmt: skip
_CHECK = ("-m", "distbridge", "check", "--backend", "gloo", "--sizes", "4,1048576", "--iters", "3")


def _run_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    return {**clean, **(extra or {})}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env=_run_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_measured(report: dict[str, Any], world_size: int) -> None:
    assert report["ok"] is True, report["error"]
    assert report["error"] is None
    assert report["world_size"] == world_size
    assert report["iters"] == 3
    assert [row["bytes"] for row in report["results"]] == [4, 1048576]
    for row in report["results"]:
        assert row["latency_s"] > 0
        assert row["algbw_bytes_per_s"] > 0
        assert row["busbw_bytes_per_s"] > 0
        assert row["algbw_bytes_per_s"] == pytest.approx(row["bytes"] / row["latency_s"])


def test_check_spawns_two_workers_and_reports_numbers() -> None:
    proc = _run(*_CHECK, "--nproc", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["launcher"] == "spawn"
    _assert_measured(report, world_size=2)


def test_check_under_torchrun_runs_on_every_rank_and_rank_0_prints() -> None:
    torchrun = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
    proc = _run(*torchrun, *_CHECK, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)  # one object: only rank 0 printed
    assert report["launcher"] == "torchelastic"
    _assert_measured(report, world_size=2)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_check_under_mpirun_reads_the_open_mpi_world() -> None:
    mpirun = ("mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2")
    proc = subprocess.run(
        [*mpirun, sys.executable, *_CHECK, "--json"],
        env=_run_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)  # one object: only rank 0 printed
    assert report["launcher"] == "openmpi"
    _assert_measured(report, world_size=2)


def test_check_names_the_failing_rank_and_exits_1_quickly() -> None:
    started = time.monotonic()
    proc = _run(*_CHECK, "--nproc", "2", "--json", env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert time.monotonic() - started < 60  # fails fast instead of waiting for --timeout
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    assert report["results"] == []
    error = report["error"]
    assert error["rank"] in (0, 1)
    assert f"Worker rank {error['rank']}" in error["message"]
    assert "nosuch0" in error["message"]
    assert "Traceback" in error["traceback"]


def test_check_text_report_of_a_failure() -> None:
    proc = _run(*_CHECK, "--nproc", "2", env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert proc.returncode == 1
    assert "\nFAILED on rank " in proc.stdout
    assert "nosuch0" in proc.stdout


def test_check_stops_at_its_timeout() -> None:
    # 100000 rounds of 64 MiB cannot finish in 3 s on any machine.
    args = ("-m", "distbridge", "check", "--backend", "gloo", "--nproc", "2", "--json")
    started = time.monotonic()
    proc = _run(*args, "--sizes", "64M", "--iters", "100000", "--timeout", "3")
    assert time.monotonic() - started < 60
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    assert report["error"]["rank"] is None
    assert "SpawnTimeoutError" in report["error"]["message"]
