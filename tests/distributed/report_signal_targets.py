"""The script of test_report_signal_spawn.py: ``python report_signal_targets.py FOLDER MODE``
runs a ``spawn`` job of two gloo workers (the warm start, the default) and prints its result.

Each worker does one all-reduce and writes its pid to ``FOLDER/worker-<rank>.pid``. Then
rank 0 waits in a second all-reduce (in C) while rank 1 waits, in Python, for
``FOLDER/go``; both then return ``(rank, sum of the ranks)``. Mode ``quick``: no waiting.

`signal_myself` is a test function for a warm world of ``distbridge.testing``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch

import distbridge as idist
from distbridge.reliability.hang import signals as hang_signals


def work(local_rank: int, folder: str, mode: str) -> tuple[int, float]:
    rank = idist.get_rank()
    idist.all_reduce(torch.ones(1))
    Path(folder, f"worker-{rank}.pid").write_text(str(os.getpid()))
    while mode != "quick" and rank == 1 and not Path(folder, "go").exists():
        time.sleep(0.05)
    return rank, idist.all_reduce(torch.tensor([float(rank)])).item()


def signal_myself() -> None:
    """Rank 1 sends itself SIGUSR2 and waits for its report; then both all-reduce."""
    if idist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGUSR2)
        report = Path(hang_signals._installed[0].dump_dir, "rank1.json")
        deadline = time.monotonic() + 30
        while not report.exists():
            assert time.monotonic() < deadline, f"no report at {report} within 30 s"
            time.sleep(0.05)
    assert idist.all_reduce(torch.ones(1)).item() == 2.0


if __name__ == "__main__":
    results = idist.spawn("gloo", work, args=tuple(sys.argv[1:3]), nproc_per_node=2)
    print(f"results: {results}", flush=True)
