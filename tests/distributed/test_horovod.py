"""Horovod for real: the backend-agnostic checks under ``horovodrun -np 2`` and ``-np 3``,
adoption of a user's ``hvd.init()``, ``spawn`` through ``horovod.run``, and availability.

Without horovod installed (the main venv) the Horovod tests skip; ``nox -s horovod`` builds
Horovod and runs them. The availability tests run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import distbridge as idist
from distbridge.errors import BackendUnavailableError, SpawnTimeoutError, WorkerFailedError
from tests.distributed import checks, horovod_checks, horovod_targets

ROOT = Path(__file__).resolve().parents[2]
HAS_HOROVOD = importlib.util.find_spec("horovod") is not None
SKIP_REASON = "horovod is not installed in this environment: run `nox -s horovod`"
needs_horovod = pytest.mark.skipif(not HAS_HOROVOD, reason=SKIP_REASON)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def _mpi_built() -> bool:
    """Horovod was built with MPI and Open MPI's mpirun is here (then the checks run on MPI too)."""
    if not HAS_HOROVOD or shutil.which("mpirun") is None:
        return False
    import horovod.torch as hvd

    return bool(hvd.mpi_built())


#: (processes, how the context is made, controller): -np 2 through initialize, -np 3 adopting
#: the user's hvd.init(); with MPI built, -np 2 on the MPI controller too (Adasum runs there).
RUNS: tuple[tuple[int, str, str], ...] = (
    (2, "initialize", "gloo"),
    (3, "adopt", "gloo"),
    *([(2, "initialize", "mpi")] if _mpi_built() else []),
)
CHECK_NAMES = [*checks.CHECKS, *horovod_checks.HVD_CHECKS]


def horovodrun(
    np: int, mode: str, tmp: Path, controller: str = "gloo", timeout: float = 240
) -> dict[int, dict[str, str]]:
    """Run tests/distributed/horovod_checks.py under horovodrun; every rank's results."""
    out, work = tmp / "out", tmp / "work"
    out.mkdir(parents=True)
    work.mkdir()
    launcher = Path(sys.executable).with_name("horovodrun")
    script = [sys.executable, "-m", "tests.distributed.horovod_checks", mode, str(out), str(work)]
    command = [str(launcher), "-np", str(np), f"--{controller}", *script]
    env = dict(os.environ)
    if controller == "mpi":  # CI runs as root; two ranks may share a core
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # horovodrun stops its workers on SIGTERM
        try:
            output, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        pytest.fail(
            f"horovodrun -np {np} --{controller} ({mode}) ran past {timeout} s:\n{output[-6000:]}"
        )
    found = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert proc.returncode == 0 and len(found) == np, (
        f"{' '.join(command[:4])} ({mode}) exited {proc.returncode} with results of ranks "
        f"{sorted(found)}:\n{output[-6000:]}"
    )
    return found


@pytest.fixture(scope="module")
def run_results(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[int, str, str], dict[int, dict[str, str]]]:
    """Each run once, every check in it (a horovodrun per check would take minutes)."""
    if not HAS_HOROVOD:
        pytest.skip(SKIP_REASON)
    return {
        run: horovodrun(run[0], run[1], tmp_path_factory.mktemp(f"hvd{run[0]}{run[2]}"), run[2])
        for run in RUNS
    }


@needs_horovod
@pytest.mark.parametrize("run", RUNS, ids=[f"np{n}-{m}-{c}" for n, m, c in RUNS])
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check(
    run_results: dict[tuple[int, str, str], dict[int, dict[str, str]]],
    run: tuple[int, str, str],
    check: str,
) -> None:
    per_rank = run_results[run]
    failures = {rank: out.get(check, "not run") for rank, out in per_rank.items()}
    failures = {rank: text for rank, text in failures.items() if text != "ok"}
    assert not failures, "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in failures.items())


@needs_horovod
def test_adopt_plain_hvd_init(tmp_path: Path) -> None:
    """Plain hvd.init(): adopted; groups need dynamic process sets and say so; a shutdown
    by hand is noticed."""
    per_rank = horovodrun(2, "adopt-static", tmp_path)
    failures = {
        (rank, name): text
        for rank, out in per_rank.items()
        for name, text in out.items()
        if text != "ok"
    }
    assert not failures, "\n".join(f"--- {k} ---\n{tb}" for k, tb in failures.items())
    assert set(per_rank[0]) == {"adopted", "groups_unavailable", "shutdown_by_hand"}


# ---- spawn through horovod.run -----------------------------------------------------------


@needs_horovod
def test_spawn_returns_every_result_in_rank_order() -> None:
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    results = idist.spawn(
        "horovod", horovod_targets.describe, args=(10,), nproc_per_node=2, job_timeout=120
    )
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["local_rank"] for r in results] == [0, 1]
    assert [r["value"] for r in results] == [10, 11]
    assert all(r["model"] == "horovod-dist" and r["world"] == 2 for r in results)
    assert all(r["total"] == 2.0 and r["nproc"] == 2 for r in results)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert idist.model_name() == "serial"


@needs_horovod
def test_parallel_spawns_with_hosts() -> None:
    with idist.Parallel(backend="horovod", nproc_per_node=3, hosts="localhost") as parallel:
        results = parallel.run(horovod_targets.describe, 0)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["world"] == 3 and r["total"] == 3.0 for r in results)


@needs_horovod
def test_spawn_fails_fast_with_the_traceback() -> None:
    started = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn("horovod", horovod_targets.fail_on_last, nproc_per_node=2, job_timeout=120)
    err = info.value
    assert err.rank == 1 and err.local_rank == 1 and err.exitcode is None
    assert "ValueError: boom from rank 1" in str(err)
    assert "fail_on_last" in err.worker_traceback
    assert time.monotonic() - started < 60, "the waiting rank must be stopped, not waited for"


@needs_horovod
def test_spawn_reports_a_worker_exit_code() -> None:
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn(
            "horovod", horovod_targets.exit_on_last, args=(3,), nproc_per_node=2, job_timeout=120
        )
    assert info.value.rank == 1 and info.value.exitcode == 3, info.value


@needs_horovod
def test_spawn_job_timeout_stops_a_hang() -> None:
    started = time.monotonic()
    with pytest.raises(SpawnTimeoutError, match="job_timeout of 8"):
        idist.spawn("horovod", horovod_targets.hang, nproc_per_node=2, job_timeout=8)
    assert time.monotonic() - started < 90


@needs_horovod
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"master_port": 1234}, TypeError, "master_port"),
        ({"hosts": "localhost:4"}, ValueError, "nproc_per_node=2"),
        ({"nnodes": 2}, ValueError, "nnodes=2"),
        ({"node_rank": 1}, ValueError, "node_rank=1"),
        ({"job_timeout": 0}, ValueError, "job_timeout"),
    ],
)
def test_spawn_rejects_bad_arguments(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        idist.spawn("horovod", horovod_targets.describe, args=(0,), nproc_per_node=2, **kwargs)


@needs_horovod
def test_initialize_makes_a_world_of_one_without_a_launcher() -> None:
    idist.initialize("horovod")
    try:
        assert idist.model_name() == "horovod-dist" and idist.get_world_size() == 1
        assert idist.all_reduce(3) == 3 and idist.all_gather("a") == ["a"]
        idist.finalize()
        with pytest.raises(TypeError, match="unexpected keyword arguments \\['port'\\]"):
            idist.initialize("horovod", port=1)
    finally:
        idist.finalize()
    assert idist.model_name() == "serial"


# ---- availability: runs with or without horovod ------------------------------------------


def _python(code: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_import_does_not_touch_horovod() -> None:
    code = (
        "import os, sys\n"
        "before = {k for k in os.environ if k.startswith('HOROVOD')}\n"
        "import distbridge\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'horovod'], 'imported'\n"
        "assert {k for k in os.environ if k.startswith('HOROVOD')} == before, 'env changed'\n"
        "distbridge.all_reduce(1)\n"
        "assert 'horovod.torch' not in sys.modules\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("broken", ["no-extension", "extension-fails"])
def test_broken_install_is_unavailable_with_the_reason(tmp_path: Path, broken: str) -> None:
    package = tmp_path / "horovod"
    (package / "torch").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "torch" / "__init__.py").write_text(
        "raise ImportError('undefined symbol: _ZN5torch3fooEv')\n"
    )
    if broken == "extension-fails":
        (package / "torch" / "mpi_lib_v2.so").write_bytes(b"junk")
    code = (
        "import distbridge as idist\n"
        "assert 'horovod' not in idist.available_backends()\n"
        "try:\n"
        "    idist.initialize('horovod')\n"
        "except idist.errors.BackendUnavailableError as err:\n"
        "    print(err)\n"
        "else:\n"
        "    raise SystemExit('initialize must fail')\n"
    )
    result = _python(code, pythonpath=tmp_path)
    assert result.returncode == 0, result.stderr
    expected = "PyTorch extension" if broken == "no-extension" else "undefined symbol"
    assert expected in result.stdout and "'horovod' is not available" in result.stdout


@pytest.mark.skipif(HAS_HOROVOD, reason="horovod is installed here")
def test_missing_horovod_says_how_to_get_it() -> None:
    assert "horovod" not in idist.available_backends()
    with pytest.raises(BackendUnavailableError, match="horovod is not installed"):
        idist.initialize("horovod")
    with pytest.raises(BackendUnavailableError, match="nox -s horovod"):
        idist.spawn("horovod", horovod_targets.describe, args=(0,), nproc_per_node=2)
