"""``python -m distbridge why``: the hang verdict of a running job, or of a dump directory.

``why DIR`` rebuilds the verdict from the files the ranks wrote to ``DISTBRIDGE_HANG_DIR``
(also after the job is gone); ``why --store HOST:PORT`` asks a running job through its
store (its MASTER_ADDR and MASTER_PORT): every rank answers with its ledger and where it is;
``why --pid PID`` finds that address on the job card of a rank (or of a rank below the
process, such as ``spawn``'s parent or torchrun's agent) and asks the same way. Every form
first removes the job cards of processes that are gone (a job whose parent was killed).
"""

from __future__ import annotations

import sys

from distbridge.reliability.hang.job_cards import find_card, prune_cards
from distbridge.reliability.hang.report import ask_job, read_dump_dir
from distbridge.reliability.hang.verdict import verdict

__all__ = ["main"]


def main(directory: str | None, store: str | None, wait: float, pid: int | None = None) -> int:
    """Print the verdict; 0 when it could be made, 1 when there was nothing to read."""
    prune_cards()
    try:
        if pid is not None:
            store = find_card(pid).store
        if store is not None:
            reports, world_size = ask_job(store, wait)
        else:  # argparse asks for exactly one of the two
            reports, world_size = read_dump_dir(directory or ".")
    except (OSError, RuntimeError, ValueError) as err:
        print(f"distbridge why: {err}", file=sys.stderr)
        return 1
    print(verdict(reports, world_size).text)
    return 0
