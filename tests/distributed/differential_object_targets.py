"""Per-rank bodies of the differential runs of objects and metric dicts (gloo, Horovod, XLA)."""

from __future__ import annotations

from collections import Counter

from tests.differential.dict_cases import DictCase, check_dict_case, dict_cases
from tests.differential.lockstep import draw_examples, run_in_lockstep
from tests.differential.object_cases import ObjectCase, check_case, object_cases

__all__ = ["run_dict_cases", "run_object_cases"]

Report = tuple[int, dict[str, int], list[str]]


def run_object_cases(
    local_rank: int, count: int, store_path: str, case_timeout: float = 30.0
) -> Report:
    """Draw ``count`` object-collective cases and run them in lockstep with the other ranks.

    Returns:
        The number of cases run, how many per function, and this rank's mismatches.
    """
    del local_rank
    cases = draw_examples(object_cases(), count)
    found = run_in_lockstep(cases, check_case, store_path, case_timeout, ObjectCase.label)
    return len(cases), dict(Counter(c.func for c in cases)), found


def run_dict_cases(
    local_rank: int, count: int, store_path: str, case_timeout: float = 30.0
) -> Report:
    """The same for the metric-dict reductions and the shared seed."""
    del local_rank
    cases = draw_examples(dict_cases(), count)
    found = run_in_lockstep(cases, check_dict_case, store_path, case_timeout, DictCase.label)
    return len(cases), dict(Counter(c.func for c in cases)), found
