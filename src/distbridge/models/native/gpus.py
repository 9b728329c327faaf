"""Whether NCCL can give each process of a node a GPU of its own: said before the rendezvous
(and before ``spawn`` starts workers), where the peers would otherwise wait."""

from __future__ import annotations

import os

from distbridge.errors import DistributedError
from distbridge.models._layout import visible_gpus

__all__ = ["check_nccl_gpus", "nccl_gpu_problem", "spawn_gpu_problem"]


def spawn_gpu_problem(processes_on_node: int) -> str | None:
    """Why NCCL workers cannot start here, ``processes_on_node`` of them, or None if they can
    (spawn asks before any worker starts)."""
    return nccl_gpu_problem(visible_gpus(), processes_on_node=processes_on_node)


def nccl_gpu_problem(
    gpus: int, *, processes_on_node: int | None = None, local_rank: int | None = None
) -> str | None:
    """Why NCCL cannot give each process of this node a GPU of its own, or None if it can.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and local rank ``r``
    computes on ``cuda:r``; a process without a GPU would fail later, or hang its peers.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"{gpus} visible CUDA GPU{'' if gpus == 1 else 's'}" + (
        "" if visible is None else f" (CUDA_VISIBLE_DEVICES={visible!r})"
    )
    fix = f"start at most {gpus} processes per node, or use the 'gloo' backend."
    if gpus == 0:
        return (
            f"Backend 'nccl' needs a CUDA GPU per process, and this machine has {seen}; use 'gloo'."
        )
    if processes_on_node is not None and processes_on_node > gpus:
        return (
            f"Backend 'nccl' needs a CUDA GPU per process: {processes_on_node} processes on "
            f"this node, {seen}; {fix}"
        )
    if local_rank is not None and local_rank >= gpus:
        return (
            f"Backend 'nccl' needs a CUDA GPU per process: local rank {local_rank} would "
            f"compute on cuda:{local_rank}, and this machine has {seen}; {fix}"
        )
    return None


def check_nccl_gpus(processes_on_node: int | None, local_rank: int | None) -> None:
    """``DistributedError`` with ``nccl_gpu_problem``'s reason, if there is one."""
    problem = nccl_gpu_problem(
        visible_gpus(), processes_on_node=processes_on_node, local_rank=local_rank
    )
    if problem is not None:
        raise DistributedError(problem)
