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
caller holds), and every worker dies with the server (``PR_SET_PDEATHSIG``); SIGUSR2, the
report signal, leaves it running (`distbridge.launch._warm_server`).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Mapping
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext
from typing import Any

__all__ = [
    "PRELOAD",
    "check_fork_is_safe",
    "die_with_parent",
    "fresh_worker_state",
    "warm_context",
]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

#: What the server imports once, before it forks any worker.
PRELOAD = (
    "torch",
    "torch.distributed",
    "cloudpickle",
    "distbridge",
    "distbridge.launch.supervisor",
    "distbridge.models.native.model",
    "distbridge.launch._warm_server",  # SIGUSR2 leaves the server running
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


def check_fork_is_safe() -> None:
    """ValueError where ``start_method="fork"`` would start workers that cannot use the
    accelerator: this process has initialized CUDA (or XPU); the warm starter has not."""
    initialized = _initialized_accelerator()
    if initialized is not None:
        raise ValueError(
            f"start_method='fork' cannot start workers here: this process has initialized "
            f"{initialized.upper()}, and a forked child cannot use it (torch: 'Cannot "
            f"re-initialize {initialized.upper()} in forked subprocess'). Use "
            "start_method='forkserver' (the default: workers fork from a server that never "
            "touched the accelerator) or 'spawn', or start the job before the first "
            f"{initialized.upper()} call."
        )


def _initialized_accelerator() -> str | None:
    """The accelerator ("cuda", "xpu") this process has initialized, from torch's own flags
    (no driver query); None when none is, or torch is not imported."""
    torch = sys.modules.get("torch")
    for kind in ("cuda", "xpu"):
        is_initialized = getattr(getattr(torch, kind, None), "is_initialized", None)
        if is_initialized is not None and is_initialized():
            return kind
    return None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the thread that started it dies (the caller's
    thread, or the warm starter's server, which itself ends with the caller)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
