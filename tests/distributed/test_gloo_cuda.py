"""gloo with CUDA tensors, every rank on the one GPU cuda:0 (NCCL refuses two ranks on one
GPU; gloo stages CUDA tensors through the host): the results land on cuda:0 and equal the
answer of the same calls on CPU tensors and the one computed here.

Skipped without a CUDA GPU; ``ci/gpu_suite.sh`` runs it on the lent GPU machine.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import distbridge as idist
from distbridge.testing import run_distributed

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.gpu,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not GPUS, reason="needs a CUDA GPU"),
]


def _inputs(rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s inputs, on the CPU."""
    return {
        "float": torch.arange(6, dtype=torch.float32).reshape(2, 3) * (rank + 1) - rank,
        "int": torch.tensor([0b1100, 0b1010, 0b0111], dtype=torch.int32) >> rank,
    }


def _collectives(device: torch.device) -> dict[str, Any]:
    """The calls, on this rank's inputs moved to ``device``: every result with its device."""
    rank = idist.get_rank()
    inputs = {k: v.to(device) for k, v in _inputs(rank).items()}
    found: dict[str, Any] = {}
    for op in ("SUM", "MAX"):
        found[f"all_reduce {op}"] = idist.all_reduce(inputs["float"].clone(), op=op)
    found["all_reduce AND"] = idist.all_reduce(inputs["int"].clone(), op="AND")
    found["reduce SUM dst=1"] = idist.reduce(inputs["float"].clone(), dst=1)
    found["all_gather"] = idist.all_gather(inputs["float"])
    found["broadcast src=1"] = idist.broadcast(inputs["float"].clone(), src=1)
    return {name: (str(t.device), t.cpu()) for name, t in found.items()}


def _on_cuda_and_cpu(local_rank: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What every rank runs: the calls on cuda:0, then on the CPU."""
    on_gpu = _collectives(torch.device("cuda", 0))
    torch.cuda.synchronize()
    return str(idist.device()), on_gpu, _collectives(torch.device("cpu"))


def _expected(world: int, rank: int) -> dict[str, torch.Tensor]:
    floats = [_inputs(r)["float"] for r in range(world)]
    ints = [_inputs(r)["int"] for r in range(world)]
    every_and = ints[0]
    for value in ints[1:]:
        every_and = every_and & value
    total = torch.stack(floats).sum(0)
    return {
        "all_reduce SUM": total,
        "all_reduce MAX": torch.stack(floats).amax(0),
        "all_reduce AND": every_and,
        "reduce SUM dst=1": total if rank == 1 else floats[rank],
        "all_gather": torch.cat(floats),
        "broadcast src=1": floats[1],
    }


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_collectives_of_cuda_tensors_on_one_gpu(world_size: int) -> None:
    results = run_distributed(_on_cuda_and_cpu, backend="gloo", world_size=world_size, timeout=240)
    for rank, (device, on_gpu, on_cpu) in enumerate(results):
        # more ranks than GPUs: idist.device() is the CPU; the tensors stay where they are
        assert device == "cpu" or world_size <= GPUS, device
        for name, want in _expected(world_size, rank).items():
            gpu_device, got = on_gpu[name]
            cpu_device, from_cpu = on_cpu[name]
            assert gpu_device == "cuda:0", (rank, name, gpu_device)
            assert cpu_device == "cpu", (rank, name, cpu_device)
            assert torch.equal(got, want), (rank, name, got, want)
            assert torch.equal(from_cpu, want), (rank, name, from_cpu, want)
