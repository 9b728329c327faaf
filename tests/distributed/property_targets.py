"""The 2-rank half of the property tests: every rank draws the same hypothesis cases and runs
them, with a check over a FileStore after each case that every rank finished it.

The ranks draw their cases themselves (derandomized, so alike) and return them: the parent
cannot draw them, since hypothesis also draws constants from the modules a process has
imported, and pytest's process imports others than a worker.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import torch.distributed as dist

import distbridge as idist
from tests import property_cases as pc

__all__ = ["cases_digest", "run_cases"]


def cases_digest(cases: list[pc.Case]) -> str:
    """A digest of the full reprs of ``cases``: equal when two processes drew the same."""
    return hashlib.sha256("\n".join(map(repr, cases)).encode()).hexdigest()


def run_cases(
    local_rank: int, count: int, store_path: str, case_timeout: float
) -> tuple[list[pc.Case], list[pc.Outcome], list[pc.Outcome]]:
    """Draw ``count`` cases, check over the store that every rank drew the same, run each
    case, then the ``TARGETED`` ones, and wait over the store until every rank has finished
    each: a case that hangs on one rank fails the job with its label instead of
    desynchronizing the next one.

    Returns:
        The drawn cases run and this rank's outcomes of those, then of ``TARGETED``'s.
    """
    cases = pc.draw_cases(count)
    rank, world = idist.get_rank(), idist.get_world_size()
    store = dist.FileStore(store_path, world)  # type: ignore[attr-defined]
    store.set(f"digest/{rank}", cases_digest(cases))
    digests = {store.get(f"digest/{r}").decode() for r in range(world)}  # get waits for it
    if len(digests) != 1:
        raise RuntimeError(f"the ranks drew different cases (digests {sorted(digests)})")
    outcomes = []
    for i, case in enumerate([*cases, *pc.TARGETED.values()]):
        outcomes.append(pc.run_case(case))
        store.set(f"{i}/{rank}", outcomes[-1].error)
        others = [f"{i}/{r}" for r in range(world) if r != rank]
        try:
            store.wait(others, timedelta(seconds=case_timeout))
        except Exception as err:  # the store's timeout: some rank is stuck in this case
            raise TimeoutError(
                f"case {i}, {case.label()}: rank {rank} finished it ({outcomes[-1].error or 'ok'})"
                f" but not every rank did within {case_timeout} s: a hang"
            ) from err
    return cases, outcomes[: len(cases)], outcomes[len(cases) :]
