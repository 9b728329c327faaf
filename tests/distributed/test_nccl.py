"""The backend-agnostic checks on real NCCL processes, one per GPU, where CUDA is.

NCCL refuses two ranks on one GPU, so the world sizes are 1 up to the number of GPUs (at most
4). On a machine without a CUDA GPU, or with a torch built without NCCL, every test here is
skipped with that reason; the CPU suite covers the same checks on gloo.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import distbridge as idist
from distbridge.testing import run_distributed
from tests.differential.dict_cases import DICT_FUNCTIONS
from tests.differential.object_cases import FUNCTIONS as OBJECT_FUNCTIONS
from tests.distributed import bitwise_targets, checks
from tests.distributed import differential_tensor_targets as tensor_targets
from tests.distributed import fail_together_targets as targets
from tests.distributed.check_runs import PerRank, failures, run_per_world_size
from tests.distributed.differential_object_targets import run_dict_cases, run_object_cases
from tests.distributed.test_debug_mode import DISAGREE_ON_PURPOSE

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
HAS_NCCL = dist.is_available() and dist.is_nccl_available()
WORLD_SIZES = tuple(range(1, min(GPUS, 4) + 1))
REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.gpu,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (GPUS and HAS_NCCL),
        reason=f"needs a CUDA GPU and a torch with NCCL (GPUs: {GPUS}, NCCL: {HAS_NCCL})",
    ),
]


@pytest.fixture(scope="module")
def nccl_results(tmp_path_factory: pytest.TempPathFactory) -> dict[int, PerRank]:
    """Every check, once per world size."""
    return run_per_world_size(tmp_path_factory, "nccl", WORLD_SIZES, timeout=300)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("check", checks.CHECKS)
def test_check(nccl_results: dict[int, PerRank], world_size: int, check: str) -> None:
    per_rank = nccl_results[world_size]
    assert len(per_rank) == world_size
    failed = failures(per_rank, [check])
    assert not failed, failed


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_differential_tensors_on_nccl(tmp_path: Path, world_size: int) -> None:
    # The generated cases of tests/distributed/test_differential_tensors_gloo.py, with every
    # tensor on this rank's GPU, against the exact answer each rank computes.
    reports = run_distributed(
        tensor_targets.run_tensor_differential,
        backend="nccl",
        world_size=world_size,
        args=(str(tmp_path / "store"), 12, 60.0),
        kwargs={"on_device": True},
        timeout=500,
    )
    mismatches = [m for report in reports for m in report["mismatches"]]
    print(f"\nNCCL, {world_size} rank(s): {reports[0]['cases']} tensor cases on each rank")
    assert len({r["digest"] for r in reports}) == 1
    assert not mismatches, "\n".join(" | ".join(m) for m in mismatches[:40])


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_reduce_with_bitwise_ops_on_nccl(tmp_path: Path, world_size: int) -> None:
    # NCCL has no bitwise ReduceOp ("Cannot use ReduceOp.BAND with NCCL"): reduce and
    # reduce_scatter fold AND / OR from an all-gather as all_reduce does. The cases of
    # test_bitwise_reductions_gloo.py, on this rank's GPU, against all_reduce and the exact answer.
    reports = run_distributed(
        bitwise_targets.run_bitwise_differential,
        backend="nccl",
        world_size=world_size,
        args=(str(tmp_path / "store"),),
        kwargs={"on_device": True},
        timeout=300,
    )
    mismatches = [m for report in reports for m in report["mismatches"]]
    print(f"\nNCCL, {world_size} rank(s): {reports[0]['cases']} bitwise cases on each rank")
    assert len({r["digest"] for r in reports}) == 1
    assert not mismatches, "\n".join(" | ".join(m) for m in mismatches[:40])
    assert all(r["rules"] == ["own"] and len(r["seen"]) == 36 for r in reports), reports[0]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize(
    ("body", "functions", "count"),
    [(run_object_cases, OBJECT_FUNCTIONS, 250), (run_dict_cases, DICT_FUNCTIONS, 150)],
    ids=["objects", "dicts"],
)
def test_differential_objects_on_nccl(
    tmp_path: Path, world_size: int, body: Any, functions: tuple[str, ...], count: int
) -> None:
    # The object collectives and metric dicts of test_differential_objects_gloo.py on NCCL
    # (objects travel through NCCL's CPU side group) against pickle round trips and sums.
    results = run_distributed(
        body, backend="nccl", world_size=world_size, args=(count, str(tmp_path / "store")),
        timeout=400,
    )  # fmt: skip
    for ran, per_function, _ in results:
        assert ran == count and set(per_function) == set(functions), per_function
    found = [line for _, _, lines in results for line in lines]
    assert not found, "\n".join(found[:20])


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_the_base_class_emulations_on_nccl(tmp_path: Path, world_size: int) -> None:
    per_rank = run_distributed(
        checks.run_checks_emulated,
        backend="nccl",
        world_size=world_size,
        args=(checks.EXTRA_CHECKS, str(tmp_path)),
        timeout=300,
    )
    failed = failures(per_rank)
    assert not failed, failed


def test_checks_pass_in_debug_mode(tmp_path: Path) -> None:
    names = [n for n in checks.CHECKS if n not in DISAGREE_ON_PURPOSE]
    per_rank = run_distributed(
        checks.run_checks,
        backend="nccl",
        world_size=min(GPUS, 2),
        args=(names, str(tmp_path)),
        timeout=300,
        debug=True,
    )
    failed = failures(per_rank)
    assert not failed, failed


def test_spawn_with_more_processes_than_gpus_is_refused_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(ValueError, match="needs a CUDA GPU per process"):
        idist.spawn("nccl", print, nproc_per_node=GPUS + 1)
    assert time.monotonic() - start < 10


def test_torchrun_with_more_processes_than_gpus_fails_with_the_reason(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    code = "import distbridge as idist; idist.initialize('nccl')"
    script = tmp_path / "init_nccl.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", str(GPUS + 1), str(script)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert f"{GPUS + 1} processes on this node" in proc.stdout + proc.stderr, proc.stderr[-3000:]


ABORT_SCRIPT = """
import time, torch, distbridge as idist
from distbridge import _state
idist.initialize("nccl")
assert idist.all_reduce(torch.ones(2, device="cuda")).tolist() == [1.0, 1.0]
start = time.monotonic()
_state.current().abort_communicator()  # what a failing rank and a peer's watcher call
aborted = time.monotonic() - start
try:
    idist.all_reduce(torch.ones(2, device="cuda"))
    torch.cuda.synchronize()
    after = "no error"
except Exception as exc:
    after = type(exc).__name__
start = time.monotonic()
idist.finalize()
print("RESULT", aborted, after, time.monotonic() - start, flush=True)
"""


def test_the_abort_path_in_a_world_of_one(tmp_path: Path) -> None:
    # A world of one cannot show peers: this runs the abort itself (ncclCommAbort through
    # torch's _abort_process_group) and checks that nothing hangs after it.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    script = tmp_path / "abort_nccl.py"
    script.write_text(ABORT_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         str(script)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    line = next((x for x in out.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, out[-4000:]
    _, aborted, after, finalized = line.split()
    print(f"\nNCCL abort: {float(aborted):.3f} s; next all_reduce: {after}; finalize {finalized} s")
    assert float(aborted) < 10 and float(finalized) < 10, line
    assert after != "no error", "an all_reduce on an aborted communicator must fail"


@pytest.mark.skipif(GPUS < 3, reason=f"needs 3 GPUs for three NCCL ranks, found {GPUS}")
def test_a_lingering_rank_on_nccl(tmp_path: Path) -> None:
    # The gloo scenario (tests/distributed/test_fail_together.py) on NCCL under torchrun.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    script = str(REPO / "tests/distributed/fail_together_targets.py")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
         script, str(tmp_path), "linger", "nccl"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode != 0
    seconds = targets.check_peers(tmp_path, "ValueError: rank 1 gives up", "all_reduce", 5.0, 5.0)
    print(f"\nFAULT NCCL torchrun, rank 1 raises, thread lingers: PeerFailed after {seconds} s")


def _bound_device(_local_rank: int) -> tuple[str, str, str]:
    """The device NCCL bound at initialize (``device_id``), idist.device() and torch's current."""
    from torch.distributed import distributed_c10d as c10d

    bound = c10d._get_default_group().bound_device_id
    return str(bound), str(idist.device()), f"cuda:{torch.cuda.current_device()}"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_initialize_binds_each_rank_s_gpu_at_start_up(world_size: int) -> None:
    results = run_distributed(_bound_device, backend="nccl", world_size=world_size, timeout=180)
    for rank, (bound, device, current) in enumerate(results):
        assert bound == device == current == f"cuda:{rank}"
