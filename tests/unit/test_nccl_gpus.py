"""NCCL's one-GPU-per-process rule, said before any process waits for a peer that never comes."""

from __future__ import annotations

import pytest

from distbridge.launch import native as launch_native
from distbridge.models.native import NativeModel
from distbridge.models.native import backends as native_gpus
from distbridge.models.native.backends import nccl_gpu_problem


def test_enough_gpus_is_no_problem() -> None:
    assert nccl_gpu_problem(processes_on_node=2, local_rank=1, gpus=2) is None
    assert nccl_gpu_problem(gpus=1) is None


def test_more_processes_than_gpus_names_both_counts_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    problem = nccl_gpu_problem(processes_on_node=2, gpus=1)
    assert problem is not None
    assert "2 processes on this node" in problem
    assert "1 visible CUDA GPU (CUDA_VISIBLE_DEVICES='3')" in problem
    assert "at most 1 processes per node, or use the 'gloo' backend" in problem


def test_a_local_rank_without_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    problem = nccl_gpu_problem(local_rank=2, gpus=2)
    assert problem is not None
    assert "local rank 2 would compute on cuda:2" in problem and "2 visible CUDA GPUs;" in problem


def test_no_gpu_at_all() -> None:
    problem = nccl_gpu_problem(processes_on_node=1, local_rank=0, gpus=0)
    assert problem is not None and "0 visible CUDA GPUs" in problem and "use 'gloo'" in problem


def test_spawn_refuses_before_starting_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_gpus, "visible_gpus", lambda: 1)
    started = []
    monkeypatch.setattr(launch_native, "run_workers", lambda *a, **k: started.append(a))
    with pytest.raises(ValueError, match=r"spawn\(nproc_per_node=2\): Backend 'nccl' needs"):
        NativeModel.spawn(print, (), {}, 2, backend="nccl")
    assert started == []
