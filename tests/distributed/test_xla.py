"""PyTorch/XLA for real, on the XLA CPU device (``PJRT_DEVICE=CPU``, a world of one).

- the backend-agnostic checks and the XLA checks through ``idist.spawn("xla-tpu", ...)``, in
  three device set-ups: as is; with ``XLA_ALWAYS_ALLREDUCE=1`` (XLA compiles and runs its real
  all-reduce even for one replica); with ``XLA_USE_32BIT_LONG=1 XLA_USE_BF16=1`` (the device
  stores int64 and float32/64 narrower, so distbridge carries them as bytes);
- the same checks in a context made by ``initialize`` (plain process and torchrun), and in
  contexts made outside distbridge (under ``xmp.spawn``; an ``xla`` process group);
- spawn's results and failures; availability and broken installs.

Without torch_xla (the main venv) those tests skip; ``nox -s xla`` runs them. Tests that need
several replicas carry the ``xla_replicas`` marker and run where ``DISTBRIDGE_XLA_REPLICAS``
says how many devices the host has.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import distbridge as idist
from distbridge.errors import PicklingError, SpawnTimeoutError, WorkerFailedError
from distbridge.launch.xla import spawn_xla
from distbridge.models import NativeModel, XlaModel
from distbridge.testing import run_distributed
from tests.distributed import checks, xla_checks, xla_targets

REPO = Path(__file__).resolve().parents[2]
HAS_XLA = importlib.util.find_spec("torch_xla") is not None
NO_XLA = "torch_xla is not installed in this environment: run `nox -s xla`"
needs_xla = pytest.mark.skipif(not HAS_XLA, reason=NO_XLA)
REPLICAS = int(os.environ.get("DISTBRIDGE_XLA_REPLICAS", "0") or 0)
NO_REPLICAS = (
    "needs several XLA replicas and the XLA CPU device cannot replicate (PJRT_DEVICE=CPU is a "
    "world of one): on a TPU or GPU host, set DISTBRIDGE_XLA_REPLICAS to its device count"
)
needs_replicas = pytest.mark.skipif(HAS_XLA and REPLICAS < 2, reason=NO_REPLICAS)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

CHECK_NAMES = [*checks.CHECKS, *xla_checks.XLA_CHECKS]
#: Device set-ups the spawned checks run in (environment variables for the replicas).
SETUPS = {
    "as-is": {},
    "real-collectives": {"XLA_ALWAYS_ALLREDUCE": "1"},
    "narrow-device": {"XLA_USE_32BIT_LONG": "1", "XLA_USE_BF16": "1"},
}


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("PJRT_DEVICE", "CPU")
    return env


def _judge(name: str, outcome: str) -> None:
    """Pass on "ok", fail with the ranks' tracebacks otherwise."""
    if outcome != "ok":
        pytest.fail(f"{name}: {outcome}", pytrace=False)


# ---- the checks through idist.spawn("xla-tpu", ...) ------------------------------------------


@pytest.fixture(scope="module", params=list(SETUPS))
def spawned(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[str, str]]:
    """Every check, run once per device set-up in one spawned replica."""
    if not HAS_XLA:
        pytest.skip(NO_XLA)
    setup = request.param
    tmp = tmp_path_factory.mktemp(setup)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in SETUPS[setup].items():
            patch.setenv(key, value)
        results = run_distributed(
            xla_targets.run_all, backend="xla-tpu", world_size=1, args=(str(tmp),), timeout=540
        )
    return setup, results[0]


@needs_xla
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check_through_spawn(spawned: tuple[str, dict[str, str]], check: str) -> None:
    _, results = spawned
    _judge(check, results[check])


# ---- the checks in contexts made by initialize, torchrun, xmp.spawn, an xla group ------------

SCENARIOS = {
    "initialize": [sys.executable, "-m", "tests.distributed.xla_targets", "initialize"],
    "torchrun": [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"),
        *("-m", "tests.distributed.xla_targets", "initialize"),
    ],
    "xmp-spawn": [sys.executable, "-m", "tests.distributed.xla_targets", "xmp"],
    "xla-process-group": [sys.executable, "-m", "tests.distributed.xla_targets", "pg"],
}


def _scenario(command: list[str], tmp: Path, timeout: float = 400) -> dict[str, str]:
    out, work = tmp / "out.json", tmp / "work"
    work.mkdir(parents=True)
    proc = subprocess.run(
        [*command, str(out), str(work)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-5000:]
    result: dict[str, str] = json.loads(out.read_text(encoding="utf-8"))
    return result


@needs_xla
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_checks_in_a_context(scenario: str, tmp_path: Path) -> None:
    results = _scenario(SCENARIOS[scenario], tmp_path)
    made = results.pop("initialized", None) or results.pop("adopted", None)
    assert made == "xla-dist", results
    group = results.pop("group", None)  # under torchrun, initialize makes the xla group
    assert group == ("xla" if scenario == "torchrun" else None)
    names = [n for n in CHECK_NAMES if n not in xla_checks.SLOW_CHECKS]
    assert sorted(results) == sorted(names)
    failed = {}
    for name in names:
        if results[name] != "ok":
            failed[name] = results[name]
    assert not failed, "\n".join(f"--- {n} ---\n{tb}" for n, tb in failed.items())


@needs_xla
def test_parallel_initializes_and_finalizes(tmp_path: Path) -> None:
    info = _scenario([sys.executable, "-m", "tests.distributed.xla_targets", "parallel"], tmp_path)
    assert info["model"] == "xla-dist" and info["after"] == "serial"
    assert info["local_rank_arg"] == 0 and info["value"] == 20 and info["tensor"] == [1.0, 1.0]
    assert info["device"].startswith("xla")


# ---- spawn: results and failures ---------------------------------------------------------


@needs_xla
def test_spawn_returns_every_result_and_parallel_too() -> None:
    results = idist.spawn(
        "xla-tpu", xla_targets.layout, args=(10,), kwargs_dict={"scale": 3}, nproc_per_node=1
    )
    assert len(results) == 1
    info = results[0]
    assert info["local_rank_arg"] == 0 and info["rank"] == 0 and info["world_size"] == 1
    assert info["model"] == "xla-dist" and info["device"].startswith("xla")
    assert info["value"] == 30
    assert info["tensor"].device.type == "cpu" and info["tensor"].tolist() == [1.0, 1.0]
    with idist.Parallel(backend="xla-tpu", nproc_per_node=1, job_timeout=300) as parallel:
        again = parallel.run(xla_targets.layout, 1)
    assert [r["value"] for r in again] == [1]


@needs_xla
def test_spawn_failure_names_the_rank_and_shows_its_traceback() -> None:
    with pytest.raises(WorkerFailedError, match=r"rank 0 .*raised ValueError: boom") as info:
        idist.spawn("xla-tpu", xla_targets.fail_on_rank, args=(0,), job_timeout=300)
    err = info.value
    assert (err.rank, err.local_rank, err.exitcode) == (0, 0, None)
    assert "boom from rank 0" in err.worker_traceback and "fail_on_rank" in err.worker_traceback


@needs_xla
@pytest.mark.parametrize(
    ("code", "says"), [(3, "exited with code 3"), (0, "exited without reporting a result")]
)
def test_spawn_reports_an_exit_code(code: int, says: str) -> None:
    with pytest.raises(WorkerFailedError, match=says) as info:
        idist.spawn("xla-tpu", xla_targets.hard_exit, args=(code,), job_timeout=300)
    assert info.value.exitcode == code


@needs_xla
def test_spawn_takes_sys_exit_0_as_success() -> None:
    assert idist.spawn("xla-tpu", xla_targets.exit_cleanly, job_timeout=300) == [None]


@needs_xla
def test_spawn_with_the_fork_start_method() -> None:
    results = idist.spawn(
        "xla-tpu", xla_targets.layout, args=(4,), start_method="fork", job_timeout=300
    )
    assert [r["value"] for r in results] == [4]


@needs_xla
def test_spawn_stops_a_job_past_its_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(SpawnTimeoutError, match="job_timeout of 25"):
        idist.spawn("xla-tpu", xla_targets.sleep, args=(600,), job_timeout=25)
    assert time.monotonic() - start < 60


@needs_xla
def test_spawn_says_when_a_result_cannot_be_pickled() -> None:
    with pytest.raises(WorkerFailedError, match="cannot be pickled"):
        idist.spawn("xla-tpu", xla_targets.unpicklable, job_timeout=300)


@needs_xla
def test_spawn_checks_nproc_per_node_against_the_devices() -> None:
    # nproc_per_node > 1 runs xmp.spawn over every device; the CPU device is one.
    with pytest.raises(WorkerFailedError, match=r"nproc_per_node=2, but this host has 1 XLA"):
        idist.spawn("xla-tpu", xla_targets.layout, args=(0,), nproc_per_node=2, job_timeout=300)


@needs_xla
def test_spawn_refuses_replicas_in_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPU_NUM_DEVICES=2: torch_xla starts a process with a thread per device; each replica
    # refuses before any collective, and the process group is stopped from inside the pool.
    monkeypatch.setenv("CPU_NUM_DEVICES", "2")
    with pytest.raises(WorkerFailedError, match="one replica per process"):
        idist.spawn("xla-tpu", xla_targets.layout, args=(0,), nproc_per_node=2, job_timeout=300)


# ---- several replicas (a TPU or GPU host) -----------------------------------------------


@pytest.mark.xla_replicas
@needs_xla
@needs_replicas
def test_checks_with_several_replicas(tmp_path: Path) -> None:
    per_rank = run_distributed(
        xla_targets.run_all,
        backend="xla-tpu",
        world_size=REPLICAS,
        args=(str(tmp_path),),
        timeout=540,
    )
    assert len(per_rank) == REPLICAS
    failed = {
        (rank, name): outcome
        for rank, results in enumerate(per_rank)
        for name, outcome in results.items()
        if outcome != "ok"
    }
    assert not failed, "\n".join(f"--- rank {r}: {n} ---\n{tb}" for (r, n), tb in failed.items())


@pytest.mark.xla_replicas
@needs_xla
@needs_replicas
def test_a_failing_replica_stops_the_others_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerFailedError, match=r"rank 1 .*boom from rank 1"):
        idist.spawn(
            "xla-tpu", xla_targets.fail_on_rank, args=(1,), nproc_per_node=REPLICAS,
            job_timeout=300,
        )  # fmt: skip
    assert time.monotonic() - start < 120, "the other replicas waited instead of stopping"


# ---- availability, registration, arguments: run everywhere ------------------------------


def test_registered_above_native() -> None:
    assert XlaModel in idist.registered_computation_models
    assert XlaModel.priority > NativeModel.priority
    assert (XlaModel.name, XlaModel.backends) == ("xla-dist", ("xla-tpu",))
    assert ("xla-tpu" in idist.available_backends()) is HAS_XLA
    assert XlaModel.unavailable_reason("gloo") == "XlaModel runs only xla-tpu"


def test_import_and_serial_calls_never_import_torch_xla() -> None:
    code = (
        "import sys, distbridge as idist\n"
        "idist.get_rank(); idist.all_reduce(1); idist.barrier(); idist.available_backends()\n"
        "print(idist.model_name(), 'torch_xla' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["serial", "False"]


BROKEN = {
    # the package imports badly (a missing libtpu, an ABI mismatch, ...)
    "import-fails": (
        {"torch_xla/__init__.py": "raise ImportError('libfoo.so: cannot open shared object')\n",
         "_XLAC.py": ""},
        True,
        "importing torch_xla failed (ImportError: libfoo.so: cannot open shared object)",
    ),
    "no-extension": (
        {"torch_xla/__init__.py": ""},
        False,
        "lacks its _XLAC extension; reinstall torch_xla",
    ),
    "version-mismatch": (
        {"torch_xla/__init__.py": "", "_XLAC.py": "",
         "torch_xla-1.0.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch_xla\n"
                                               "Version: 1.0.0\n"},
        False,
        "torch_xla 1.0.0 needs torch 1.0.*, but torch",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_install_is_unavailable_and_says_why(case: str, tmp_path: Path) -> None:
    files, available_at_first, reason = BROKEN[case]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    code = (
        "import json, distbridge as idist\n"
        "first = 'xla-tpu' in idist.available_backends()\n"
        "try:\n"
        "    idist.initialize('xla-tpu')\n"
        "    error = None\n"
        "except idist.BackendUnavailableError as err:\n"
        "    error = str(err)\n"
        "print(json.dumps([first, error, 'xla-tpu' in idist.available_backends()]))\n"
    )
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    first, error, after = json.loads(proc.stdout.splitlines()[-1])
    assert first is available_at_first
    assert error is not None and reason in error, error
    assert error.startswith("Backend 'xla-tpu' is not available: ")
    assert after is False


#: (dtype, rows of three ranks, op, expected): the fold combines rows in rank order.
FOLDS = [
    (torch.uint64, [[5], [-(2**63) + 1], [7]], "MAX", [-(2**63) + 1]),  # unsigned order
    (torch.uint64, [[5], [-(2**63) + 1], [7]], "MIN", [5]),
    (torch.uint64, [[-1], [1], [0]], "SUM", [0]),  # wraps as uint64 does
    (torch.uint16, [[65535], [1], [2]], "SUM", [2]),
    (torch.uint32, [[6], [3], [5]], "AND", [0]),
    (torch.uint32, [[6], [3], [5]], "OR", [7]),
    (torch.int64, [[12], [10], [14]], "AND", [8]),
    (torch.int64, [[1], [2], [4]], "OR", [7]),
    (torch.bool, [[True, True], [True, False], [True, True]], "AND", [True, False]),
    (torch.float8_e4m3fn, [[1.0], [2.0], [3.0]], "AVG", [2.0]),
    (torch.float8_e5m2, [[1.0], [2.0], [4.0]], "SUM", [7.0]),
    (torch.bfloat16, [[1.0], [-4.0], [2.0]], "MIN", [-4.0]),
    (torch.float64, [[0.1], [0.2], [0.3]], "SUM", [(0.1 + 0.2) + 0.3]),  # in rank order
    (torch.float64, [[2.0], [3.0], [4.0]], "PRODUCT", [24.0]),
    (torch.complex128, [[1 + 2j], [3 - 1j], [0.5j]], "SUM", [4 + 1.5j]),
    (torch.complex32, [[1 + 2j], [3 - 1j], [2 + 2j]], "AVG", [2 + 1j]),
]


@pytest.mark.parametrize(("dtype", "rows", "op", "expected"), FOLDS)
def test_the_fold_reduces_several_ranks_exactly(
    dtype: torch.dtype, rows: list[list[object]], op: str, expected: list[object]
) -> None:
    # With one replica the fold has one row; here it gets three, as on a pod.
    from distbridge.algorithms.fold import fold as _fold

    def tensor(values: list[object]) -> torch.Tensor:
        if dtype is torch.uint64:  # written as int64 bits
            return torch.tensor(values, dtype=torch.int64).view(torch.uint64)
        wide = torch.complex128 if dtype.is_complex else torch.float64
        if not (dtype.is_complex or dtype.is_floating_point):
            wide = torch.bool if dtype is torch.bool else torch.int64
        return torch.tensor(values, dtype=wide).to(dtype)

    out = _fold(torch.stack([tensor(r) for r in rows]), op)
    assert out.dtype == dtype
    want = tensor(expected)
    assert out.reshape(-1).view(torch.uint8).tolist() == want.view(torch.uint8).tolist()


def test_spawn_arguments_are_checked_before_anything_starts() -> None:
    def nested(local_rank: int) -> None:
        pass

    cases: list[tuple[type[Exception], str, dict[str, object]]] = [
        (ValueError, "nnodes=2, node_rank=0, but XLA takes the hosts", {"nnodes": 2}),
        (ValueError, "join=False is not supported", {"join": False}),
        (ValueError, "Unknown start_method .thread.. Allowed", {"start_method": "thread"}),
        (ValueError, "nproc_per_node must be an int >= 1, got 0", {"nproc_per_node": 0}),
        (PicklingError, "nested", {"fn": nested}),
    ]
    for error, message, kwargs in cases:
        call = {"fn": xla_targets.sleep, "nproc_per_node": 1, **kwargs}
        fn, nproc = call.pop("fn"), call.pop("nproc_per_node")
        with pytest.raises(error, match=message):
            spawn_xla(XlaModel.from_backend, fn, (), {}, nproc, **call)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['master_port'\]"):
        XlaModel.spawn(xla_targets.sleep, (), {}, 1, backend="xla-tpu", master_port=1234)


def test_initialize_takes_no_options_but_debug() -> None:
    # Refused before torch_xla is imported; without torch_xla, initialize says it is missing.
    initialize = idist.initialize if HAS_XLA else XlaModel.from_backend
    expected = r"\['init_method'\]; the xla-dist model takes debug \(the runtime knows the"
    with pytest.raises(TypeError, match=expected):
        initialize("xla-tpu", init_method="tcp://x")
