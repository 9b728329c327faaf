"""The device rule every model that can use CUDA shares (``Layout.device``): a GPU per process
of the node, or the CPU on every rank of it alike."""

from __future__ import annotations

import pytest
import torch

from distbridge.models._layout import Layout


def _layout(local_rank: int, nproc_per_node: int) -> Layout:
    return Layout(
        rank=local_rank,
        world_size=nproc_per_node,
        local_rank=local_rank,
        nproc_per_node=nproc_per_node,
        nnodes=1,
        node_rank=0,
    )


@pytest.mark.parametrize("local_rank", [0, 1, 2, 3])
def test_a_gpu_per_process_gives_cuda_local_rank(local_rank: int) -> None:
    assert _layout(local_rank, 4).device(4) == torch.device("cuda", local_rank)
    assert _layout(local_rank, 4).device(8) == torch.device("cuda", local_rank)


@pytest.mark.parametrize("local_rank", [0, 1, 2])
def test_fewer_gpus_than_processes_puts_every_rank_on_the_cpu(local_rank: int) -> None:
    # Rank 0 and 1 have a GPU, rank 2 has none: all three compute on the CPU, never a mix.
    assert _layout(local_rank, 3).device(2) == torch.device("cpu")


def test_no_gpu_is_the_cpu_even_where_one_is_required() -> None:
    assert _layout(0, 1).device(0) == torch.device("cpu")
    assert _layout(0, 1).device(0, gpu_required=True) == torch.device("cpu")


def test_a_backend_that_requires_a_gpu_takes_cuda_local_rank() -> None:
    # NCCL: the device follows the local rank; its own check refuses a rank without a GPU.
    assert _layout(1, 3).device(2, gpu_required=True) == torch.device("cuda", 1)
