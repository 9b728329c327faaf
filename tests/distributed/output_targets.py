"""Top-level worker functions for test_spawn_output.py (workers import them by name)."""

from __future__ import annotations

import os
import stat
import sys
import time

import distbridge as idist

LONG = 200_000  # characters: longer than a pipe's buffer and a file's write buffer
ROUNDS = 20


def expected_lines(rank: int) -> list[str]:
    """Every line ``chatter`` writes on rank ``rank``, on stdout and on stderr each."""
    lines = [f"rank {rank} round {i} " + f"{rank}" * 50 + " end" for i in range(ROUNDS)]
    return [*lines, str(rank) * LONG, f"rank {rank} unfinished"]


def chatter(local_rank: int) -> dict[str, object]:
    """Both ranks write the same kind of lines at the same time, each in pieces (flushed
    separately, so that raw they would mix mid-line), on stdout and stderr; the last line
    has no newline. Returns what the worker's stdout is."""
    rank = idist.get_rank()
    idist.barrier()
    *lines, unfinished = expected_lines(rank)
    for line in lines:
        for stream in (sys.stdout, sys.stderr):
            half = len(line) // 2
            stream.write(line[:half])
            stream.flush()
            time.sleep(0.001)
            stream.write(line[half:] + "\n")
            stream.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.write(unfinished)
        stream.flush()
    mode = os.fstat(1)
    return {"fifo": stat.S_ISFIFO(mode.st_mode), "file": (mode.st_dev, mode.st_ino)}


def print_then_fail(local_rank: int) -> None:
    rank = idist.get_rank()
    print(f"rank {rank} was here", flush=True)
    idist.barrier()
    if rank == 1:
        raise ValueError("boom on rank 1")
    idist.barrier()


def stdout_is_a_terminal(local_rank: int) -> bool:
    print(f"rank {idist.get_rank()} says hello", flush=True)
    return os.isatty(1)
