"""The warm starter: one fork server per process, with torch and distbridge already imported.

The first job that starts its workers with the "forkserver" start method (``spawn``'s default)
starts the server: a fresh interpreter that imports `PRELOAD` once and then waits. It never
initializes CUDA, starts no process group and runs no user code, so forking it is safe even
when the calling process has initialized CUDA (forking the caller itself would not be). Every
worker of this job and of later jobs is a fork of that server: it starts in milliseconds
instead of paying for a fresh interpreter and ``import torch``.

Nothing of one job reaches the next: each worker is a new fork of the untouched server, and
`fresh_worker_state` gives it the caller's environment variables as they are when the job
starts (the server's copy dates from its own start) and new random seeds where a fork would
share them. The server ends when the calling process ends (it reads EOF on a pipe that only the
caller holds), and every worker dies with the server (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Mapping
from multiprocessing.context import ForkServerContext

__all__ = ["PRELOAD", "fresh_worker_state", "warm_context"]

#: What the server imports once, before it forks any worker.
PRELOAD = (
    "torch",
    "torch.distributed",
    "cloudpickle",
    "distbridge",
    "distbridge.launch.supervisor",
    "distbridge.models.native.model",
)


def warm_context() -> ForkServerContext:
    """The "forkserver" context whose server has imported `PRELOAD` (set before it starts)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # no effect once the server runs
    return context


def fresh_worker_state(environ: Mapping[str, str] | None) -> None:
    """In a worker just forked from the server: take the caller's environment variables
    ``environ`` (None: keep them) and reseed what a fork would share with its siblings."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # a fresh interpreter seeds numpy's global generator from the OS
        numpy.random.seed()
    # Python's `random` reseeds itself after every fork; torch's default generator starts
    # from the same fixed seed in every fresh interpreter, and the server never used it.
