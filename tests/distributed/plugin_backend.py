"""A torch.distributed backend registered under a new name, as a third-party backend is:
``Backend.register_backend("wrappedgloo", creator, devices=["cpu"])``, whose creator returns
torch's own ``ProcessGroupGloo``. Importing this module registers it (once per process)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import distbridge as idist

__all__ = ["NAME", "report"]

NAME = "wrappedgloo"


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """The backend's creator: a gloo process group over ``store``."""
    return dist.ProcessGroupGloo(store, rank, size, timeout)


if NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(NAME, _create, devices=["cpu"])


def report(_local_rank: int) -> dict[str, Any]:
    """What this rank sees, and a few collectives' answers, on the registered backend."""
    rank = idist.get_rank()
    x = torch.tensor([rank + 1.0], device=idist.device())
    return {
        "backend": idist.backend(),
        "torch_backend": str(dist.get_backend()),
        "model": idist.model_name(),
        "rank": rank,
        "world_size": idist.get_world_size(),
        "device": str(idist.device()),
        "sum": idist.all_reduce(x).tolist(),
        "max": idist.all_reduce(rank, op="MAX"),
        "gathered": idist.all_gather(f"r{rank}"),
        "broadcast": idist.broadcast(torch.arange(3.0) * (rank + 1), src=1).tolist(),
        "object": idist.broadcast_object({"from": rank} if rank == 0 else None, src=0),
    }
