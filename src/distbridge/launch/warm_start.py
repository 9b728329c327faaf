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

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Mapping
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext
from typing import Any

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


def fresh_worker_state(environ: Mapping[str, str]) -> None:
    """In a worker just forked from the server: take the caller's environment variables
    ``environ``, reseed what a fork shares with its siblings, and let go of the server.

    multiprocessing gives every fork of the server a copy of the pipe whose EOF tells the
    server that its caller is gone: while a worker holds it, a SIGKILLed caller would leave
    the server, and with it the workers, running. The worker closes it (a process the worker
    starts with "forkserver" starts a server of its own)."""
    os.environ.clear()
    os.environ.update(environ)
    server: Any = forkserver._forkserver  # multiprocessing's one ForkServer
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = server._forkserver_pid = None
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # a fresh interpreter seeds numpy's global generator from the OS
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:  # and torch's CPU generator (CUDA's start unseeded until first use)
        torch.default_generator.seed()
    # Python's `random` reseeds itself after every fork.
