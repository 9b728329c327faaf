"""Metric-dict reductions and the shared seed against an exact local answer.

A case holds every rank's dict (same keys, kinds and shapes on every rank, as the functions
require) and a function: ``all_reduce_dict`` (sum / mean), ``reduce_dict`` (onto ``dst``,
averaged or not), ``average_across_processes`` (a float tensor or a dict) or
``shared_random_seed``. Values are multiples of 1/8 (and NaN / ±inf), so their float64 sum
is exact in any order: the expected result is computed here, from every rank's dict. A NaN
in a sum equals any NaN: its sign is the arithmetic's (x86 makes inf + -inf a negative NaN,
and a NaN operand passes its own sign), so it depends on the order of the additions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

import distbridge as idist
from tests.differential.payloads import difference

__all__ = ["DICT_FUNCTIONS", "DictCase", "check_dict_case", "dict_cases"]

MAX_WORLD = 4
DICT_FUNCTIONS = (
    "all_reduce_dict",
    "reduce_dict",
    "average_across_processes",
    "average_across_processes_dict",
    "shared_random_seed",
)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
_SPECIAL = (math.nan, math.inf, -math.inf)


@dataclass(frozen=True)
class _Spec:
    """One key's value on every rank: a Python / numpy number or a tensor of one shape."""

    kind: str  # "int", "float", "np_float32", "np_int64", "tensor"
    dtype: torch.dtype | None
    shape: tuple[int, ...]
    values: tuple[tuple[float, ...], ...]  # per rank, flat


@st.composite
def _spec(draw: st.DrawFn) -> _Spec:
    kind = draw(st.sampled_from(["int", "float", "np_float32", "np_int64", "tensor", "tensor"]))
    dtype = None
    shape: tuple[int, ...] = ()
    if kind == "tensor":
        dtype = draw(st.sampled_from(_FLOAT_DTYPES + _INT_DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    integral = kind in ("int", "np_int64") or dtype in _INT_DTYPES
    if dtype == torch.bool:
        element = st.sampled_from([0.0, 1.0])
    elif integral:
        element = st.integers(0 if dtype == torch.uint8 else -20, 20).map(float)
    else:  # multiples of 1/8, exact in every dtype here; specials now and then
        element = st.one_of(st.integers(-256, 256).map(lambda n: n / 8), st.sampled_from(_SPECIAL))
    count = math.prod(shape)
    values = draw(st.tuples(*[st.tuples(*[element] * count) for _ in range(MAX_WORLD)]))
    return _Spec(kind, dtype, shape, values)


@dataclass(frozen=True, eq=False)
class DictCase:
    """``func`` on every rank with that rank's dict built from ``specs``."""

    func: str
    specs: tuple[tuple[str, _Spec], ...]
    op: str  # "sum" / "mean" (all_reduce_dict); "mean" means average=True for reduce_dict
    dst: int
    seeds: tuple[int, ...]  # shared_random_seed: each rank seeds numpy with its own

    def label(self) -> str:
        kinds = {k: (s.kind, str(s.dtype), s.shape) for k, s in self.specs}
        return f"{self.func}(op={self.op}, dst={self.dst}, {kinds})"


def dict_cases() -> st.SearchStrategy[DictCase]:
    """Any metric-dict reduction (or the shared seed) with every rank's input."""
    keys = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
    return st.builds(
        DictCase,
        func=st.sampled_from(DICT_FUNCTIONS),
        specs=st.dictionaries(keys, _spec(), min_size=1, max_size=4).map(
            lambda d: tuple(d.items())
        ),
        op=st.sampled_from(["sum", "mean"]),
        dst=st.integers(0, MAX_WORLD - 1),
        seeds=st.tuples(*[st.integers(0, 2**32 - 1)] * MAX_WORLD),
    )


def _value(spec: _Spec, rank: int) -> Any:
    flat = spec.values[rank]
    if spec.kind == "int":
        return int(flat[0])
    if spec.kind == "float":
        return float(flat[0])
    if spec.kind == "np_float32":
        return np.float32(flat[0])
    if spec.kind == "np_int64":
        return np.int64(int(flat[0]))
    return torch.tensor(flat, dtype=torch.float64).to(spec.dtype).reshape(spec.shape)


def _expected(spec: _Spec, world: int, mean: bool) -> Any:
    """The exact sum or mean over ``world`` ranks, in the type the docstrings promise."""
    total = torch.tensor(spec.values[:world], dtype=torch.float64).reshape(world, -1).sum(0)
    integral = spec.kind in ("int", "np_int64") or spec.dtype in _INT_DTYPES
    if integral and not mean:
        total_int = torch.tensor(spec.values[:world], dtype=torch.float64).to(torch.int64)
        total = total_int.reshape(world, -1).sum(0)
    if mean:
        total = total / world
    if spec.kind == "tensor":
        dtype = torch.float64 if integral and mean else spec.dtype
        return total.reshape(spec.shape).to(dtype)
    return float(total.item()) if (mean or not integral) else int(total.item())


def _one_nan(value: Any) -> Any:
    """``value`` with every float NaN in it made ``math.nan`` (tensors: a new one)."""
    if isinstance(value, dict):
        return {key: _one_nan(v) for key, v in value.items()}
    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        return torch.where(value.isnan(), torch.full_like(value, math.nan), value)
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return type(value)(math.nan)
    return value


def _sums_differ(expected: Any, got: Any) -> str:
    """``difference`` of two reduced results, a NaN equal to any NaN."""
    return difference(_one_nan(expected), _one_nan(got))


def check_dict_case(case: DictCase) -> str:
    """Run ``case`` on this rank: "" when the result is the exact local answer."""
    world, rank = idist.get_world_size(), idist.get_rank()
    if case.func == "shared_random_seed":
        expected = int(np.random.RandomState(case.seeds[0]).randint(2**31))
        np.random.seed(case.seeds[rank])
        return difference(expected, idist.shared_random_seed())
    if case.func == "average_across_processes":  # a float tensor, averaged in place
        wide = (torch.float32, torch.float64)  # the sum is exact in them: one rounding, in /
        spec = next((s for _, s in case.specs if s.dtype in wide), None)
        spec = spec or _Spec("tensor", torch.float64, (2,), ((0.5, -1.0),) * MAX_WORLD)
        x = _value(spec, rank)
        got = idist.average_across_processes(x)
        if got is not x:
            return "the tensor was not averaged in place"
        total = torch.stack([_value(spec, r) for r in range(world)]).sum(0)
        return _sums_differ(total / world, got)
    mine = {key: _value(spec, rank) for key, spec in case.specs}
    mean = case.op == "mean" or case.func == "average_across_processes_dict"
    expected = {key: _expected(spec, world, mean) for key, spec in sorted(case.specs)}
    if case.func == "reduce_dict":
        dst = case.dst % world
        got = idist.reduce_dict(mine, average=mean, dst=dst)
        return _sums_differ(expected if rank == dst else mine, got)
    if case.func == "average_across_processes_dict":
        return _sums_differ(expected, idist.average_across_processes(mine))
    return _sums_differ(expected, idist.all_reduce_dict(mine, op=case.op))
