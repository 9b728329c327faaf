"""Per-rank body of the object collectives' differential run (gloo, Horovod, XLA)."""

from __future__ import annotations

from tests.differential.lockstep import draw_examples, run_in_lockstep
from tests.differential.object_cases import ObjectCase, check_case, object_cases

__all__ = ["run_object_cases"]


def run_object_cases(
    local_rank: int, count: int, store_path: str, case_timeout: float = 30.0
) -> tuple[int, dict[str, int], list[str]]:
    """Draw ``count`` object cases, run them in lockstep with the other ranks.

    Returns:
        The number of cases run, how many per function, and this rank's mismatches.
    """
    del local_rank
    cases = draw_examples(object_cases(), count)
    per_function: dict[str, int] = {}
    for case in cases:
        per_function[case.func] = per_function.get(case.func, 0) + 1
    found = run_in_lockstep(cases, check_case, store_path, case_timeout, ObjectCase.label)
    return len(cases), per_function, found
