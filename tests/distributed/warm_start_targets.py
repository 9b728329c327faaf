"""Top-level worker functions for tests/distributed/test_warm_start.py (importable, so that
workers forked from the warm starter find them by reference)."""

from __future__ import annotations

import os
import random
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import distbridge as idist

#: The variable the first job sets in its workers; the next job must not see it.
LEAK = "DISTBRIDGE_TEST_LEAKED_VARIABLE"
#: The variable the parent sets between two jobs; the second job must see it.
LATE = "DISTBRIDGE_TEST_SET_BETWEEN_JOBS"


def state_and_mess(local_rank: int) -> dict[str, Any]:
    """What a worker finds when it starts, then leave every kind of state behind."""
    found = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "leaked": os.environ.get(LEAK),
        "late": os.environ.get(LATE),
        "torch_seed": torch.initial_seed(),
        "random": random.random(),
        "numpy": float(np.random.random()),
        "model": idist.model_name(),
        "world": idist.get_world_size(),
        "default_group": dist.group.WORLD is not None,
        "cuda_initialized": torch.cuda.is_initialized(),
        "modules": "torch" in sys.modules,
        "cwd": os.getcwd(),
        "sum": float(idist.all_reduce(torch.tensor(float(local_rank + 1)))),
    }
    os.environ[LEAK] = "set by a worker of an earlier job"
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    return found


def uses_cuda(local_rank: int) -> tuple[bool, float]:
    """Whether CUDA was initialized when the worker started, and a sum computed on a GPU."""
    initialized_at_start = torch.cuda.is_initialized()
    return initialized_at_start, float(torch.ones(4, device="cuda").sum())
