"""How many aten operators one eager ``idist.all_reduce`` runs besides the collective itself,
as torch.profiler records them (every event named ``aten::...``, nested ones included), on a
real gloo world of one and on the serial model (the same code path, no process group). On a
GPU each of them is a kernel launch or an allocation, so they are the facade's own cost.

- SUM and PRODUCT go to the engine as they are: no operator at all, as a raw
  ``dist.all_reduce``.
- float MIN / MAX go through integer order keys made in the caller's tensor
  (``algorithms/carriers.py``, ``_OrderKeys``): MAX is one ``view`` to the integers and three
  operators each way (shift, xor, add); MIN first makes every NaN one negative NaN
  (``nan_to_num``, written in place): 8, the budget of issue 36. (Until the NaNs were made
  one, MIN needed a constant added each way, 9: no 3-operator encoding keeps the positive
  NaNs below the numbers.)
- 16-bit floats go as a new float32 tensor (gloo and NCCL have no int16): ``empty`` and a
  ``copy_`` in, a ``copy_`` out.
- integer and bool MIN / MAX need no keys: none.

(AVG on gloo, which has no average of its own, is a SUM and a ``div_`` by the world size:
five events, the division and the Python number made a tensor; not held here.)

Before these keys (isnan / masked_fill and Python scalars wrapped into tensors), a float32
MAX ran 36, a float64 one 20 and a 16-bit one 42.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import distbridge as idist

#: the exact count per (dtype, op) this code runs today: a change shows here
EXPECTED = {
    **{(d, op): 0 for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                             torch.int32, torch.int64, torch.bool) for op in ("SUM", "PRODUCT")},
    **{(d, op): 0 for d in (torch.int32, torch.int64, torch.bool) for op in ("MIN", "MAX")},
    (torch.float32, "MAX"): 7,  # view + (shift, xor, add) + (shift, add, xor)
    (torch.float64, "MAX"): 7,
    (torch.float32, "MIN"): 8,  # nan_to_num + MAX's
    (torch.float64, "MIN"): 8,
    (torch.float16, "MAX"): 10,  # MAX's + float32 keys: empty, copy_ in, copy_ out
    (torch.bfloat16, "MAX"): 10,
    (torch.float16, "MIN"): 11,
    (torch.bfloat16, "MIN"): 11,
}  # fmt: skip
#: the budget of float32 / float64 MIN and MAX (issue 36)
BUDGET = 8


def aten_ops(call: Callable[[], object]) -> list[str]:
    """The aten operators torch.profiler records during ``call()`` (after one call to warm
    the caches of the facade's first call), nested ones included."""
    call()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    return [e.name for e in prof.events() if e.name.startswith("aten::")]


def _sample(dtype: torch.dtype) -> torch.Tensor:
    if dtype is torch.bool:
        return torch.tensor([True, False] * 32)
    if dtype.is_floating_point:
        specials = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), 1e-40, -3e38]
        return torch.tensor(specials * 8, dtype=torch.float64).to(dtype)
    return torch.arange(-32, 32, dtype=dtype)


@pytest.fixture(params=["gloo", "serial"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A real gloo process group of one rank, or none (the serial model)."""
    if request.param == "gloo":
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
        )
    try:
        assert idist.backend() == (None if request.param == "serial" else "gloo")
        yield request.param
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize(("dtype", "op"), sorted(EXPECTED, key=str))
def test_aten_operators_per_all_reduce(
    world: str, dtype: torch.dtype, op: str, record_property: Callable[[str, object], None]
) -> None:
    x = _sample(dtype)
    before = x.clone()
    names = aten_ops(lambda: idist.all_reduce(x, op))
    record_property("aten_ops", len(names))  # in pytest's --junitxml report
    print(f"{world} {dtype} {op}: {len(names)} aten ops {names}")
    assert len(names) == EXPECTED[(dtype, op)], names
    if op in ("MIN", "MAX") and dtype in (torch.float32, torch.float64):
        assert len(names) <= BUDGET
    if op in ("MIN", "MAX"):  # a world of one gives the input back, bit for bit, in place
        assert torch.equal(x.view(torch.uint8), before.view(torch.uint8))


def test_max_keys_write_into_the_callers_tensor(world: str) -> None:
    """No copy back: the keys are made, reduced and turned back in ``x``'s own memory."""
    x = _sample(torch.float32)
    names = aten_ops(lambda: idist.all_reduce(x, "MAX"))
    assert "aten::copy_" not in names and "aten::isnan" not in names, names
    assert names.count("aten::view") == 1, names
    assert idist.all_reduce(x, "MAX") is x
