"""Worker functions for the Horovod spawn tests (top level, so workers can import them)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

import distbridge as idist


def describe(local_rank: int, base: int) -> dict[str, Any]:
    total = idist.all_reduce(torch.ones(1)).item()
    return {
        "local_rank": local_rank,
        "rank": idist.get_rank(),
        "world": idist.get_world_size(),
        "model": idist.model_name(),
        "value": base + idist.get_rank(),
        "total": total,
        "nproc": idist.get_nproc_per_node(),
    }


def fail_on_last(local_rank: int) -> None:
    """The last rank raises; the others wait in a collective it never joins."""
    if idist.get_rank() == idist.get_world_size() - 1:
        raise ValueError(f"boom from rank {idist.get_rank()}")
    idist.barrier()
    time.sleep(120)


def exit_on_last(local_rank: int, code: int) -> None:
    if idist.get_rank() == idist.get_world_size() - 1:
        os._exit(code)
    time.sleep(120)


def hang(local_rank: int) -> None:
    time.sleep(600)
