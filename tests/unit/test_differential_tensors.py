"""Differential property tests of the tensor and number collectives on the serial model.

A world of one: every result must be the exact answer the reference computes
(``tests/differential/tensor_reference.py``) on hypothesis-drawn valid inputs, byte for byte,
with the Python type of a number kept. Hypothesis shrinks a failing case. The same cases run
on 2 and 3 gloo ranks in ``tests/distributed/test_differential_tensors_gloo.py``. Below, the
reference itself is checked: the drawn values reduce alike in any order and dtype, and the
rank-order fold other models use (``algorithms/fold.py``) gives the reference's answer.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import distbridge as idist
from distbridge.algorithms.fold import fold
from distbridge.models import SerialModel
from tests.differential import tensor_cases as tc
from tests.differential import tensor_inputs as ti
from tests.differential import tensor_reference as ref
from tests.distributed import differential_tensor_targets as targets

pytestmark = pytest.mark.timeout(120)

EXAMPLES = 30  # per function, shrinking on failure
PER_FUNC = 16  # the fixed run over every (dtype, op) pair

_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _run(case: tc.Case) -> set[str]:
    mismatches, tags = targets.run_case(case)
    assert not mismatches, "\n".join(" | ".join(m) for m in mismatches)
    assert idist.model_name() == "serial"
    return tags


@pytest.mark.parametrize("func", tc.FUNCS)
def test_tensor_collective_gives_the_exact_answer(func: str) -> None:
    seen: Counter[str] = Counter()

    @_SETTINGS
    @given(tc.tensor_case(func, 1))
    def prop(case: tc.TensorCase) -> None:
        seen.update(_run(case))

    prop()
    assert seen[f"func:{func}"] >= EXAMPLES // 2


@pytest.mark.parametrize("func", tc.NUMBER_FUNCS)
def test_number_collective_gives_the_exact_answer(func: str) -> None:
    seen: Counter[str] = Counter()

    @_SETTINGS
    @given(tc.number_case(func, 1))
    def prop(case: tc.NumberCase) -> None:
        seen.update(_run(case))

    prop()
    assert seen[f"func:number:{func}"] >= EXAMPLES // 2


def test_every_dtype_op_and_layout_gives_the_exact_answer() -> None:
    """The run the gloo ranks make, in a world of one: every (dtype, op) pair of every
    reduction, every dtype of every move, every variant and layout."""
    cases = tc.draw_cases(1, PER_FUNC)
    assert len(cases) == tc.case_count(PER_FUNC)
    seen: Counter[str] = Counter()
    found: list[targets.Mismatch] = []
    for case in cases:
        mismatches, tags = targets.run_case(case)
        found += mismatches
        seen.update(tags)
    assert not found, "\n".join(" | ".join(m) for m in found[:40])
    missing = targets.required_tags(1, SerialModel.reduce_ops) - set(seen)
    assert not missing, f"no case exercised {sorted(missing)}"


# ---- the reference itself ----------------------------------------------------------------------


def _reductions() -> list[tc.TensorCase]:
    """Cases of the three reductions in a world of 3: every (dtype, op) pair of each."""
    cases = tc.draw_cases(3, 1)
    return [c for c in cases if isinstance(c, tc.TensorCase) and c.func in tc.REDUCTIONS]


def _members_values(case: tc.TensorCase) -> list[torch.Tensor]:
    inputs = ti.build_inputs(case, 3)
    return [inputs[m][0] for m in case.members(3)]


def test_drawn_values_reduce_alike_in_any_order() -> None:
    """The values the cases draw reduce to the same bits in any order, and in the tensor's
    own dtype (floats part by part) as in float64: no order can change the exact answer."""
    steps = {"SUM": torch.add, "AVG": torch.add, "MIN": torch.minimum, "MAX": torch.maximum}
    for case in _reductions():
        assert case.op is not None
        firsts = _members_values(case)
        exact = ref.reduce_exact(firsts, case.op)
        found = ref.difference(ref.reduce_exact(firsts[::-1], case.op), exact, exact_bits=False)
        dtype = tc.DTYPES[case.dtype]
        if (dtype.is_floating_point or dtype.is_complex) and case.op in steps:
            parts = [torch.view_as_real(t) if dtype.is_complex else t for t in firsts]
            acc = parts[-1]
            for value in parts[-2::-1]:  # reversed, in the dtype itself
                acc = steps[case.op](acc, value)
            acc = acc / len(parts) if case.op == "AVG" else acc
            acc = torch.view_as_complex(acc.contiguous()) if dtype.is_complex else acc
            found = found or ref.difference(acc, exact, exact_bits=False)
        assert not found, f"{case.label()}: {found}"


def test_fold_gives_the_exact_answer() -> None:
    """``_fold.fold``, the exact rank-order reduction of gathered rows (XLA's inexact dtypes,
    AND / OR on NCCL and Horovod, complex PRODUCT), against the reference."""
    for case in _reductions():
        assert case.op is not None
        firsts = _members_values(case)
        got = fold(torch.stack(firsts), case.op)
        found = ref.difference(got, ref.reduce_exact(firsts, case.op), exact_bits=False)
        assert not found, f"{case.label()}: {found}"


@pytest.mark.parametrize(
    ("values", "op", "expected"),
    [
        ([torch.tensor([100], dtype=torch.int8)] * 2, "SUM", torch.tensor([-56], dtype=torch.int8)),
        ([torch.tensor([True, False])] * 3, "SUM", torch.tensor([True, False])),
        ([torch.tensor([-0.0, -0.0]), torch.tensor([-0.0, 0.0])], "SUM", torch.tensor([-0.0, 0.0])),
        ([torch.tensor([math.inf]), torch.tensor([-math.inf])], "SUM", torch.tensor([math.nan])),
        ([torch.tensor([0.0]), torch.tensor([-math.inf])], "PRODUCT", torch.tensor([math.nan])),
        (
            [torch.tensor([complex(math.inf, 1.0)]), torch.tensor([complex(1.0, 2.0)])],
            "AVG",
            torch.tensor([complex(math.inf, 1.5)]),  # part by part, as torch's AVG
        ),
        (
            [torch.tensor([2**64 - 1], dtype=torch.uint64), torch.tensor([2], dtype=torch.uint64)],
            "SUM",
            torch.tensor([1], dtype=torch.uint64),
        ),
    ],
)
def test_reference_reductions(values: list[torch.Tensor], op: str, expected: torch.Tensor) -> None:
    assert not ref.difference(ref.reduce_exact(values, op), expected, exact_bits=False)


def test_comparison_tells_every_bit_apart() -> None:
    zero, nan = torch.tensor([0.0]), torch.tensor([math.nan])
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert ref.difference(torch.tensor([-0.0]), zero, exact_bits=False)
    assert not ref.difference(other_nan, nan, exact_bits=False)  # a reduced NaN is a NaN
    assert ref.difference(other_nan, nan, exact_bits=True)  # a moved one keeps its payload
    assert ref.difference(zero.double(), zero, exact_bits=True)  # dtype
    assert ref.difference(zero.reshape(1, 1), zero, exact_bits=True)  # shape
    two = torch.tensor([2], dtype=torch.uint8).view(torch.bool)
    assert ref.difference(two, torch.tensor([True]), exact_bits=False)  # a bool is 0 or 1
    assert ref.difference(1.0, 1, exact_bits=True)  # a number keeps its type
    assert ref.difference(True, 1, exact_bits=True)
    assert not ref.difference([1, "a"], [1, "a"], exact_bits=True)
