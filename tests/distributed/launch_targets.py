"""Top-level worker functions for test_native_launch.py (workers import them by name)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import distbridge as idist


def layout(local_rank: int) -> dict[str, Any]:
    return {
        "local_rank_arg": local_rank,
        "rank": idist.get_rank(),
        "local_rank": idist.get_local_rank(),
        "world_size": idist.get_world_size(),
        "nproc_per_node": idist.get_nproc_per_node(),
        "nnodes": idist.get_nnodes(),
        "node_rank": idist.get_node_rank(),
        "sum": idist.all_reduce(idist.get_rank() + 1),
        "master_port": os.environ.get("MASTER_PORT"),
    }


def fail_on_rank(local_rank: int, bad_rank: int) -> None:
    if idist.get_rank() == bad_rank:
        raise ValueError(f"boom from rank {bad_rank}")
    time.sleep(60)


def kill_self_on_rank(local_rank: int, bad_rank: int) -> None:
    if idist.get_rank() == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def sleep_and_record(local_rank: int, folder: str) -> None:
    Path(folder, f"pid-{local_rank}").write_text(str(os.getpid()))
    time.sleep(60)


class _CommunicationForbiddenError(RuntimeError):
    pass


def adopt_user_group(local_rank: int, world_size: int, rdzv: str) -> dict[str, Any]:
    """User code creates the process group itself; distbridge adopts it without talking."""
    dist.init_process_group(
        "gloo", init_method=f"file://{rdzv}", rank=local_rank, world_size=world_size
    )
    names = [
        "all_reduce",
        "all_gather",
        "all_gather_object",
        "broadcast",
        "barrier",
        "all_gather_single",
        "all_gather_into_tensor",
        "broadcast_object_list",
    ]
    saved = {n: getattr(dist, n) for n in names if hasattr(dist, n)}

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise _CommunicationForbiddenError("adoption must not communicate")

    for name in saved:
        setattr(dist, name, forbidden)
    try:
        adopted = {
            "model": idist.model_name(),
            "backend": idist.backend(),
            "rank": idist.get_rank(),
            "world_size": idist.get_world_size(),
            "local_rank": idist.get_local_rank(),
            "nproc_per_node": idist.get_nproc_per_node(),
            "nnodes": idist.get_nnodes(),
            "device": str(idist.device()),
        }
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
    adopted["sum"] = idist.all_reduce(torch.tensor([1.0])).item()
    dist.destroy_process_group()
    adopted["after_destroy"] = idist.model_name()
    # a second, different group (a subset world) is adopted afresh: nothing stale
    if local_rank == 0:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        adopted["second_world_size"] = idist.get_world_size()
        adopted["second_sum"] = idist.all_reduce(5)
        dist.destroy_process_group()
    return adopted


def detectron2_main(base: int) -> dict[str, int]:
    """A detectron2-style entry point: no local-rank argument."""
    return {"value": base + idist.get_rank(), "world": idist.get_world_size()}
