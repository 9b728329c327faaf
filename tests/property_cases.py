"""Bad inputs for every facade function, drawn by hypothesis.

Shared by the serial property tests (``tests/unit/test_properties.py``) and the 2-rank gloo
run (``tests/distributed/test_properties_gloo.py``); the cases run through
``tests/property_runner.py``, whose names this module re-exports.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.property_runner import (
    DOCUMENTED,
    Built,
    Case,
    Opaque,
    Outcome,
    PerRank,
    normalize,
    run_case,
)

__all__ = [
    "CASES",
    "DOCUMENTED",
    "TARGETED",
    "Built",
    "Case",
    "Opaque",
    "Outcome",
    "PerRank",
    "case_strategy",
    "draw_cases",
    "normalize",
    "run_case",
]

# ---- strategies -------------------------------------------------------------------------------

_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
    torch.complex64,
)
_FILLS = (0.0, 1.0, -3.0, math.nan, math.inf, -math.inf)


@st.composite
def _dense_tensor(draw: st.DrawFn, dim0: st.SearchStrategy[int] | None = None) -> torch.Tensor:
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.lists(st.integers(0, 3), min_size=0, max_size=3))
    if dim0 is not None:
        shape = [draw(dim0), *shape[:2]]
    fill = draw(st.sampled_from(_FILLS))
    if not (dtype.is_floating_point or dtype.is_complex) and not math.isfinite(fill):
        fill = 7.0
    if dtype == torch.uint8 and fill < 0:
        fill = 3.0
    return torch.full(shape, fill, dtype=dtype)


_ODD_TENSORS = st.sampled_from([Built("sparse"), Built("nine_dims"), Built("strided")])
TENSORS = st.one_of(_dense_tensor(), _ODD_TENSORS)

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**63, -(2**63) - 1, 2**200]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(["", "é" * 50, "x" * 10_000, "\x00"]),
    st.binary(max_size=4),
    st.lists(st.integers(-2, 2), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(-2, 2), max_size=2),
    st.sampled_from(
        [
            Opaque(),
            complex(1, 2),
            PurePosixPath("a/b"),
            timedelta(seconds=-1),
            Built("lock"),
            Built("lambda"),
        ]
    ),
)
VALUES = st.one_of(TENSORS, JUNK)
# Values that are pickled, never printed (a repr of "deep" fails in Python itself).
PICKLED = st.one_of(VALUES, st.just(Built("deep")))

# Valid in a world of 1 and of 2 alike (0), or invalid in both.
ROOTS = st.sampled_from(
    [0, 0, 2, 3, -1, 10**9, 2**63, True, False, None, 0.0, 1.5, "0", math.nan, [0]]
)
OPS = st.sampled_from(
    [
        "SUM", "sum", "avg", "AVERAGE", "mean", "prod", "min", "MAX", "and", "OR", "band",
        "ADASUM", "XOR", "", "SUMM", " sum", None, 0, True, b"SUM", ["SUM"],
    ]
)  # fmt: skip
GROUPS = st.sampled_from(
    [
        None, None, [0], (0,), range(1), [], [0, 0], [-1], [2], [True], ["0"], [0.0], 0,
        "world", range(2**40), range(-(2**40), 0), Opaque(), [10**30], [None],
    ]
)  # fmt: skip
FLAGS = st.sampled_from([False, True, None, 0, 1, "yes", math.nan])
TIMEOUTS = st.sampled_from(
    [None, 5, 5.0, timedelta(seconds=5), 0, -1, math.nan, math.inf, -math.inf, "5", True, [5]]
)
NAMES = st.sampled_from([None, "eval", "", 3, b"x", ["n"]])
SERIALIZERS = st.sampled_from([None, None, 3, Opaque(), "json"])


def _kw(**strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[tuple[str, Any], ...]]:
    """Keyword arguments: each one present or left at its default."""
    items = [st.one_of(st.none(), st.tuples(st.just(k), s)) for k, s in strategies.items()]
    return st.tuples(*items).map(lambda pairs: tuple(p for p in pairs if p is not None))


def _case(func: str, args: st.SearchStrategy[Any], **kw: st.SearchStrategy[Any]) -> Any:
    return st.builds(Case, st.just(func), args, _kw(**kw))


# Lists of 1 or 2 entries have the right length in a world of 1 or of 2, so their errors
# rightly differ between the serial model and 2 ranks: left out, junk lists included.
_TENSOR_LISTS = st.one_of(
    st.builds(PerRank, TENSORS),
    st.lists(TENSORS, max_size=3).filter(lambda t: len(t) not in (1, 2)),
    JUNK.filter(lambda v: not (isinstance(v, list) and len(v) in (1, 2))),
)
_SHAPES = st.one_of(
    st.builds(PerRank, st.lists(st.sampled_from([0, 1, 2, 2**40, 2**62, -1, 1.5, None]))),
    st.sampled_from([None, [], 3, "ab", [[2**62], [2**62], [2**62]], [None]]),
)
_DICTS = st.one_of(
    st.dictionaries(
        st.one_of(st.text(max_size=2), st.integers(0, 2)), st.one_of(VALUES), max_size=3
    ),
    JUNK,
)

#: One strategy per facade function: the name distbridge exports, and its arguments.
CASES: dict[str, st.SearchStrategy[Case]] = {
    "all_reduce": _case("all_reduce", st.tuples(VALUES), op=OPS, group=GROUPS),
    "all_gather": _case("all_gather", st.tuples(PICKLED), group=GROUPS),
    "broadcast": _case("broadcast", st.tuples(VALUES), src=ROOTS, safe_mode=FLAGS, group=GROUPS),
    "barrier": _case("barrier", st.tuples(), group=GROUPS, timeout=TIMEOUTS, name=NAMES),
    "reduce": _case("reduce", st.tuples(VALUES), dst=ROOTS, op=OPS, group=GROUPS),
    "gather": _case("gather", st.tuples(PICKLED), dst=ROOTS, group=GROUPS, same_shape=FLAGS),
    "scatter": _case(
        "scatter", st.tuples(_TENSOR_LISTS), src=ROOTS, group=GROUPS, out=st.one_of(VALUES)
    ),
    "reduce_scatter": _case(
        "reduce_scatter",
        st.tuples(st.one_of(_dense_tensor(st.sampled_from([0, 2, 4])), _ODD_TENSORS, JUNK)),
        op=OPS,
        group=GROUPS,
    ),
    "all_to_all": _case(
        "all_to_all",
        st.tuples(st.one_of(_TENSOR_LISTS, _dense_tensor(st.sampled_from([0, 1, 2, 4])))),
        group=GROUPS,
        same_shape=FLAGS,
    ),
    "new_group": _case("new_group", st.tuples(GROUPS), backend=st.sampled_from(["nope", 3, None])),
    "all_gather_tensors_with_shapes": _case(
        "all_gather_tensors_with_shapes", st.tuples(VALUES, _SHAPES), group=GROUPS
    ),
    "all_gather_object": _case(
        "all_gather_object", st.tuples(PICKLED), group=GROUPS, serializer=SERIALIZERS
    ),
    "gather_object": _case(
        "gather_object", st.tuples(PICKLED), dst=ROOTS, group=GROUPS, serializer=SERIALIZERS
    ),
    "broadcast_object": _case(
        "broadcast_object", st.tuples(PICKLED), src=ROOTS, group=GROUPS, serializer=SERIALIZERS
    ),
    "scatter_object": _case(
        "scatter_object",
        st.tuples(st.one_of(st.builds(PerRank, VALUES), JUNK)),
        src=ROOTS,
        group=GROUPS,
        serializer=SERIALIZERS,
    ),
    "all_reduce_dict": _case(
        "all_reduce_dict", st.tuples(_DICTS), op=st.one_of(OPS, st.just("mean")), group=GROUPS
    ),
    "reduce_dict": _case("reduce_dict", st.tuples(_DICTS), average=FLAGS, dst=ROOTS, group=GROUPS),
    "average_across_processes": _case(
        "average_across_processes", st.tuples(st.one_of(_DICTS, VALUES))
    ),
    "gather_results": _case(
        "gather_results",
        st.tuples(st.one_of(st.lists(st.integers(0, 9), max_size=3), JUNK)),
        total=st.sampled_from([None, 0, 1, -1, 1.5, "3", True, 10**6, math.nan]),
        order=st.sampled_from(["interleave", "contiguous", "random", None, 1]),
        dst=st.one_of(st.none(), ROOTS),
        group=GROUPS,
    ),
    "one_rank_only": _case("one_rank_only", st.tuples(ROOTS, FLAGS)),
    "one_rank_first": _case("one_rank_first", st.tuples(ROOTS, FLAGS, TIMEOUTS)),
    "set_local_rank": _case("set_local_rank", st.tuples(st.one_of(ROOTS, JUNK))),
}

# Not in CASES: shared_random_seed (no arguments), rank_zero_only (only wraps a function),
# and initialize / spawn, which the serial property tests cover on their own (in a worker of
# a live world they fail with "already initialized" or would start processes).


#: Fixed cases for a world of several ranks that the strategies reach rarely or not at all,
#: by name; ``tests/distributed/test_properties_gloo.py`` states what each must do.
TARGETED: dict[str, Case] = {
    # The source's tensors do not fit ``out``: the others already wait in the scatter.
    "scatter_out_mismatch": Case("scatter", (PerRank(torch.zeros(3)),), (("out", torch.zeros(2)),)),
    # Another rank's shape would not fit in memory.
    "shapes_too_big": Case("all_gather_tensors_with_shapes", (torch.zeros(1), [[1], [2**40]])),
    # Rank 1's tensor does not match shapes[1]: it alone can tell, the others already gather.
    "shapes_mismatch_on_one_rank": Case(
        "all_gather_tensors_with_shapes", (torch.zeros(2), [[2], [3]])
    ),
    "new_group_bad_backend": Case("new_group", ([0],), (("backend", "nope"),)),
    "new_group_unknown_option": Case("new_group", ([0],), (("bogus", 3),)),
}


def case_strategy() -> st.SearchStrategy[Case]:
    """Any facade function, with arguments drawn for it."""
    return st.one_of(*CASES.values())


def draw_cases(count: int) -> list[Case]:
    """``count`` cases, the same list in every process: hypothesis is derandomized (its seed is
    a hash of this function) and nothing but the strategies decides what it draws."""
    drawn: list[Case] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case_strategy())
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn
