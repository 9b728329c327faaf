"""Run by test_fork_safety.py with the accelerator probe loaded: imports distbridge, runs a
gloo job of two workers from the warm starter, and writes what it saw as JSON."""

from __future__ import annotations

import json
import os
import sys
from multiprocessing import forkserver
from typing import Any


def work(local_rank: int) -> dict[str, Any]:
    import torch

    import distbridge as idist

    total = idist.all_reduce(torch.tensor([local_rank + 1.0])).item()
    return {"pid": os.getpid(), "ppid": os.getppid(), "sum": total, "device": str(idist.device())}


def main(out: str) -> None:
    marks = os.path.join(os.environ["DISTBRIDGE_PROBE_DIR"], "calls.log")

    def mark(what: str) -> None:
        with open(marks, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()}\tMARK {what}\t\n")

    import distbridge as idist

    mark("imported")
    workers = idist.spawn("gloo", work, nproc_per_node=2)
    mark("job done")
    try:  # no GPU in CI: spawn refuses before any worker starts, after counting the GPUs
        idist.spawn("nccl", work, nproc_per_node=1)
    except ValueError as err:
        nccl_refusal = str(err)
    else:
        nccl_refusal = ""  # a CUDA machine: the job ran
    mark("nccl done")
    server: Any = forkserver._forkserver
    found = {
        "parent": os.getpid(),
        "server": server._forkserver_pid,
        "workers": workers,
        "nccl_refusal": nccl_refusal,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main(sys.argv[1])
