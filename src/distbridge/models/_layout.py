"""Where a process sits in the job: rank, local rank, processes per node, nodes."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from distbridge.environments import LaunchEnvironment

_CPU = torch.device("cpu")

__all__ = [
    "Layout",
    "export_layout",
    "layout_from_env",
    "layout_from_store",
    "node_name",
    "restore_env",
    "visible_gpus",
]


@dataclass(frozen=True)
class Layout:
    """A process's place in a job of ``world_size`` ranks on ``nnodes`` machines."""

    rank: int
    world_size: int
    local_rank: int
    nproc_per_node: int
    nnodes: int
    node_rank: int

    def with_local_rank(self, index: int) -> Layout:
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"A local rank must be an int >= 0, got {index!r}.")
        return replace(self, local_rank=index)

    def device(self, gpus: int, *, gpu_required: bool = False, kind: str = "cuda") -> torch.device:
        """The device this process computes on, given the ``gpus`` (accelerator devices of
        type ``kind``) it sees: as in ignite, ``<kind>:<local rank>`` where an accelerator
        is, but only where every process of the node has a device of its own (or the
        backend needs one, as NCCL does); else the CPU. Every rank of a node decides alike,
        so no collective mixes accelerator and CPU tensors (DDP and gloo hang on that,
        Horovod refuses it)."""
        if gpus > 0 and (gpu_required or self.nproc_per_node <= gpus):
            return torch.device(kind, self.local_rank)
        return _CPU


def visible_gpus() -> int:
    """The number of CUDA GPUs this process can use (0 without CUDA).

    Fork-safe where NVML answers: torch counts the GPUs through NVML before it asks the CUDA
    driver, whose first query would leave later forks of this process unable to use CUDA
    (``spawn`` counts the GPUs in the parent, before any worker starts)."""
    return torch.cuda.device_count()


def layout_from_env(
    launch: LaunchEnvironment | None,
    rank: int,
    world_size: int,
    peers: Callable[[], Layout] | None = None,
) -> Layout:
    """The layout the launcher described, if it matches ``rank`` and ``world_size``.

    Complete when the launcher gives the local rank, the processes on this node, the node's
    index and the number of nodes. Otherwise ``peers()`` when given (the caller asks the
    peers), else a guess: nodes are assumed filled in rank order (``node_rank = rank //
    nproc_per_node``, Open MPI's and jsrun's default placement), or one node when even the
    local layout is unknown. Whether a launcher gives the whole layout is the same on every
    rank of a job, so either every rank asks the peers or none does.
    """
    if launch is not None and (launch.rank, launch.world_size) != (rank, world_size):
        launch = None  # the launcher describes another job: ignore it
    if launch is not None and launch.local_rank is not None and launch.local_world_size:
        nproc = launch.local_world_size
        if launch.node_rank is not None and launch.nnodes is not None:
            return Layout(
                rank, world_size, launch.local_rank, nproc, launch.nnodes, launch.node_rank
            )
        if peers is not None:
            return peers()
        nnodes = launch.nnodes if launch.nnodes is not None else -(-world_size // nproc)
        node_rank = launch.node_rank if launch.node_rank is not None else rank // nproc
        return Layout(
            rank, world_size, launch.local_rank, nproc, nnodes, min(node_rank, nnodes - 1)
        )
    if peers is not None:
        return peers()
    local = launch.local_rank if launch is not None and launch.local_rank is not None else rank
    return Layout(rank, world_size, local, world_size, 1, 0)


def node_name(launch: LaunchEnvironment | None) -> str:
    """What tells this process's node apart from the others: the launcher's node id when it
    gives one (e.g. Open MPI's daemon), else the host name."""
    if launch is not None and launch.node_id:
        return launch.node_id
    return socket.gethostname()


def layout_from_store(store: Any, rank: int, world_size: int, hostname: str) -> Layout:
    """Ask the peers for their node names through ``store`` (a torch.distributed Store).

    ``hostname`` is this process's node name (``node_name``). Ranks with the same name form a
    node; nodes are numbered by their lowest rank.
    """
    store.set(f"distbridge/host/{rank}", hostname)
    hosts = [store.get(f"distbridge/host/{r}").decode("utf-8") for r in range(world_size)]
    nodes = list(dict.fromkeys(hosts))
    same_host = [r for r, host in enumerate(hosts) if host == hostname]
    return Layout(
        rank=rank,
        world_size=world_size,
        local_rank=same_host.index(rank),
        nproc_per_node=len(same_host),
        nnodes=len(nodes),
        node_rank=nodes.index(hostname),
    )


def export_layout(layout: Layout) -> dict[str, str | None]:
    """Set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK where they are unset, for
    code that reads them; return what they were before (None: unset), for `restore_env`."""
    wanted = {
        "RANK": layout.rank,
        "LOCAL_RANK": layout.local_rank,
        "WORLD_SIZE": layout.world_size,
        "LOCAL_WORLD_SIZE": layout.nproc_per_node,
        "GROUP_RANK": layout.node_rank,
    }
    previous: dict[str, str | None] = {}
    for key, value in wanted.items():
        if not os.environ.get(key):  # unset or empty, as read_int treats it
            previous[key] = os.environ.get(key)
            os.environ[key] = str(value)
    return previous


def restore_env(previous: Mapping[str, str | None]) -> None:
    """Put the variables of ``previous`` back as they were (None: unset)."""
    for key, old in previous.items():
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
