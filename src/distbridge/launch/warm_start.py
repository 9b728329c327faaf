"""The warm starter: one fork server per process, with torch and distbridge already imported.

The first job that starts its workers with "forkserver" (``spawn``'s default) starts the
server: a fresh interpreter that imports `PRELOAD` once and waits. It never initializes CUDA
and runs no user code, so forking it is safe even where the caller has initialized CUDA, and
a worker starts in milliseconds instead of paying for ``import torch``. Each worker is a new
fork of the untouched server (`fresh_worker_state`), so nothing of one job reaches the next.
The server ends with the calling process (EOF on a pipe only the caller holds), and every
worker dies with the server (`die_with_parent`).
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
    accelerator: this process has initialized CUDA (or XPU), by torch's own flags (no driver
    query); the warm starter has not."""
    torch = sys.modules.get("torch")
    for kind in ("CUDA", "XPU"):
        is_initialized = getattr(getattr(torch, kind.lower(), None), "is_initialized", None)
        if is_initialized is not None and is_initialized():
            raise ValueError(
                f"start_method='fork' cannot start workers here: this process has initialized "
                f"{kind}, and a forked child cannot use it (torch: 'Cannot re-initialize {kind} "
                "in forked subprocess'). Use start_method='forkserver' (the default: workers "
                "fork from a server that never touched the accelerator) or 'spawn', or start "
                f"the job before the first {kind} call."
            )


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the thread that started it dies (the caller's
    thread, or the warm starter's server, which itself ends with the caller)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
