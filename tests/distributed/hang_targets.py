"""What the ranks run in test_hang_verdict.py: three all-reduces, then one rank goes astray.

Under ``spawn`` it is `spawned`; under torchrun this file is the script (``main``: its
arguments are the folder and the mode).

Modes (``spawned(local_rank, folder, mode)``):

- ``sleep``: rank 2 sleeps in `stuck_here` (plain Python) while ranks 0 and 1 wait in the
  fourth all-reduce;
- ``diverge``: rank 1 calls an all-gather where ranks 0 and 2 call that all-reduce;
- ``kill``: rank 2 SIGKILLs itself instead;
- ``kill_handled``: as ``kill``, where every rank has a SIGTERM handler of its own (one that
  ignores it; distbridge then leaves SIGTERM alone), so a launcher's SIGTERM ends no rank;
- ``barrier``: as ``sleep``, but ranks 0 and 1 wait in ``barrier(timeout=BARRIER_TIMEOUT)``;
- ``c_call``: rank 2 blocks in a C function that holds the GIL (``PyDLL``'s ``sleep``), so it
  can answer nothing (until a signal interrupts the sleep);
- ``c_deadlock``: as ``c_call``, but the C call is a deadlock (a mutex locked twice) that no
  signal ends: the rank stays silent through a launcher's SIGTERM, until its SIGKILL.

Rank 0 writes ``<folder>/started`` (the time it entered the fourth collective) and
``<folder>/caught`` (the time its error came), every rank that gets its error
``<folder>/caught-<rank>``, rank 2 ``<folder>/killed`` (the time it SIGKILLs itself), and
every rank its pid to ``<folder>/worker-<rank>.pid``. The lines marked ``# SITE:<name>`` are
the ones the verdict must name.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import time
from pathlib import Path

import torch

import distbridge as idist

STUCK_SECONDS = 120.0  # far longer than the test waits: the verdict must not wait for it
BARRIER_TIMEOUT = 5.0
TORCHRUN_TIMEOUT = 10  # the process group's timeout under torchrun (as the issue tried)
SETTLE_SECONDS = 1.5  # rank 2 waits this long before going astray: its ledger is published


def stuck_here() -> None:
    time.sleep(STUCK_SECONDS)  # SITE:stuck


def stuck_in_c() -> None:
    libc = ctypes.PyDLL(ctypes.util.find_library("c"))  # PyDLL: the GIL stays held
    libc.sleep(int(STUCK_SECONDS))  # SITE:c_call


def deadlocked_in_c() -> None:
    libc = ctypes.PyDLL(ctypes.util.find_library("c"))  # PyDLL: the GIL stays held
    mutex = ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER (glibc)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # SITE:c_deadlock


def spawned(local_rank: int, folder: str, mode: str) -> int:
    rank = idist.get_rank()
    Path(folder, f"worker-{rank}.pid").write_text(str(os.getpid()))
    x = torch.ones(3)
    for _ in range(3):
        idist.all_reduce(x)  # SITE:third
    if rank == 2 and mode != "diverge":
        time.sleep(SETTLE_SECONDS)
        if mode in ("sleep", "barrier"):
            stuck_here()
        elif mode in ("kill", "kill_handled"):
            Path(folder, "killed").write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "c_call":
            stuck_in_c()
        elif mode == "c_deadlock":
            deadlocked_in_c()
    if rank == 0:
        Path(folder, "started").write_text(repr(time.time()))
    try:
        if rank == 1 and mode == "diverge":
            idist.all_gather(x)  # SITE:odd
        elif mode == "barrier":
            idist.barrier(timeout=BARRIER_TIMEOUT)  # SITE:barrier
        else:
            idist.all_reduce(x)  # SITE:fourth
    finally:
        now = repr(time.time())
        Path(folder, f"caught-{rank}").write_text(now)
        if rank == 0:
            Path(folder, "caught").write_text(now)
    return rank


def main(folder: str, mode: str, backend: str = "gloo") -> None:
    """One rank under torchrun (gloo, with `TORCHRUN_TIMEOUT`) or horovodrun ("horovod"):
    ``initialize`` from the launcher's variables."""
    if mode == "kill_handled":
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if backend == "gloo":
        idist.initialize("gloo", timeout=TORCHRUN_TIMEOUT)
    else:
        idist.initialize(backend)
    try:
        spawned(idist.get_local_rank(), folder, mode)
    finally:
        idist.finalize()


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:4])
